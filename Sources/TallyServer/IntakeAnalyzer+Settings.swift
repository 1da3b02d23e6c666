import TallyProtocol

/// The config file's `analysis` section: how the hub analyses an intake
/// job's photos once they are uploaded (see `IntakeAnalyzer`).
///
/// ```json
/// "analysis": {"enabled": true, "ocr": false, "timeout": "30s", "workers": 1,
///              "serialPatterns": ["SN[- ]?\\d+"], "namePatterns": []}
/// ```
public struct AnalysisSettings: Sendable, Equatable {
    /// Off: a job still moves media-uploaded → analyzed at once, with
    /// status "skipped".
    public var enabled = true
    /// Read label text with Tesseract (about 20 MB and 100 ms to load per
    /// worker, and a second or more per photo).
    public var ocr = false
    /// How long one job's analysis may take before the job moves on with
    /// status "timeout".
    public var timeoutMillis = 30_000
    /// Analysis threads (each decodes one photo at a time).
    public var workers = 1
    /// Codes (whole) and text lines (the first match in the line) that are
    /// serial numbers.
    public var serialPatterns = [#"SN[- ]?\d+"#]
    /// Text lines that name the item (the first such line is proposed).
    public var namePatterns: [String] = []
    /// False where something else plays the analyser (the intake runner's
    /// tests): the hub then leaves records in media-uploaded to it.
    package var byHub = true

    public init() {}

    /// Parses the section; `path` is its JSON path (`$.analysis`). Errors
    /// name the member to fix.
    static func parse(_ value: JSONValue, _ path: String) throws(HubConfigFile.Invalid) -> AnalysisSettings {
        guard case .object(let members) = value else {
            throw HubConfigFile.Invalid(path: path, message: "must be an object such as {\"enabled\": true, \"ocr\": false, \"timeout\": \"30s\"}")
        }
        var settings = AnalysisSettings()
        for (key, member) in members {
            let here = "\(path).\(key)"
            switch key {
            case "enabled": settings.enabled = try bool(member, here)
            case "ocr": settings.ocr = try bool(member, here)
            case "timeout":
                guard let millis = duration(member), millis >= 100, millis <= 3_600_000 else {
                    throw HubConfigFile.Invalid(path: here, message: "must be a duration from 100ms to 1h, such as \"30s\", \"500ms\" or \"2m\" (a bare number is seconds)")
                }
                settings.timeoutMillis = millis
            case "workers": settings.workers = try HubConfigFile.int(member, here, 1...16)
            case "serialPatterns": settings.serialPatterns = try patterns(member, here)
            case "namePatterns": settings.namePatterns = try patterns(member, here)
            default:
                throw HubConfigFile.Invalid(path: here, message: "unknown setting; known: enabled, ocr, timeout, workers, serialPatterns, namePatterns")
            }
        }
        return settings
    }

    private static func bool(_ value: JSONValue, _ path: String) throws(HubConfigFile.Invalid) -> Bool {
        guard case .bool(let flag) = value else { throw HubConfigFile.Invalid(path: path, message: "must be true or false") }
        return flag
    }

    /// Regular expressions (Swift `Regex` syntax, as in most engines).
    private static func patterns(_ value: JSONValue, _ path: String) throws(HubConfigFile.Invalid) -> [String] {
        guard case .array(let items) = value, items.count <= 32 else {
            throw HubConfigFile.Invalid(path: path, message: "must be an array of at most 32 regular expressions, e.g. [\"SN[- ]?\\\\d+\"]")
        }
        var result: [String] = []
        for (index, item) in items.enumerated() {
            let here = "\(path)[\(index)]"
            let text = try HubConfigFile.string(item, here)
            guard text.utf8.count <= 500 else { throw HubConfigFile.Invalid(path: here, message: "is longer than 500 bytes") }
            do { _ = try Regex(text) } catch {
                throw HubConfigFile.Invalid(path: here, message: "is not a valid regular expression: \(error)")
            }
            result.append(text)
        }
        return result
    }

    /// `"30s"`, `"500ms"`, `"2m"`, `"1h"`, or a number of seconds.
    static func duration(_ value: JSONValue) -> Int? {
        switch value {
        case .number(let number):
            let seconds = number.doubleValue
            guard seconds.isFinite, seconds >= 0, seconds < 1e7 else { return nil }
            return Int(seconds * 1000)
        case .string(let text):
            let units: [(suffix: String, millis: Double)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
            for unit in units where text.hasSuffix(unit.suffix) {
                guard let amount = Double(text.dropLast(unit.suffix.count)), amount.isFinite, amount >= 0, amount < 1e7 else { return nil }
                return Int(amount * unit.millis)
            }
            return nil
        default:
            return nil
        }
    }
}
