import TallyProtocol

/// What the hub found in a job's photos: the `analysis` object it writes
/// when it advances the intake record media-uploaded → analyzed (issue 18's
/// contract: status, reason, millis, photos, codes, text, proposals, and
/// `accepted` once the owner took the proposals). Read leniently: a member
/// of the wrong type reads as absent, so a newer hub's analysis still shows.
public struct IntakeAnalysis: Sendable, Equatable {
    /// One code found in a photo, and what `/v1/resolve` made of it.
    public struct Code: Sendable, Equatable {
        public var code: String
        public var symbology: String
        public var photo: String?
        /// Whether `name` is an existing item (else the name a new one gets).
        public var found: Bool
        public var name: String?
    }

    /// What the analysis offers to write on the item.
    public struct Proposals: Sendable, Equatable {
        public var serials: [String]
        public var codes: [String]
        public var name: String?

        public var isEmpty: Bool { serials.isEmpty && codes.isEmpty && name == nil }
    }

    /// The object as the hub wrote it (with `accepted` when merged in).
    public var json: JSONObject

    public init?(_ value: JSONValue?) {
        guard case .object(let object)? = value else { return nil }
        json = object
    }

    /// "done", "failed", "timeout" or "skipped" ("?" when missing).
    public var status: String { json["status"]?.stringValue ?? "?" }
    public var reason: String? { json["reason"]?.stringValue }
    public var millis: Int64? { json["millis"]?.numberValue?.int64Value }
    public var photoCount: Int? { json["photos"]?.arrayValue?.count }

    public var codes: [Code] {
        (json["codes"]?.arrayValue ?? []).compactMap { value in
            guard let code = value["code"]?.stringValue else { return nil }
            return Code(code: code, symbology: value["symbology"]?.stringValue ?? "?",
                        photo: value["photo"]?.stringValue, found: value["found"] == .bool(true),
                        name: value["name"]?.stringValue)
        }
    }

    /// The label lines OCR read (only with the hub's `analysis.ocr`).
    public var text: [String] { (json["text"]?.arrayValue ?? []).compactMap(\.stringValue) }

    public var proposals: Proposals {
        let object = json["proposals"]
        return Proposals(serials: (object?["serials"]?.arrayValue ?? []).compactMap(\.stringValue),
                         codes: (object?["codes"]?.arrayValue ?? []).compactMap(\.stringValue),
                         name: object?["name"]?.stringValue)
    }

    /// Who accepted the proposals and when (milliseconds since 1970).
    public var accepted: (by: String, time: Int64)? {
        guard let object = json["accepted"], let by = object["by"]?.stringValue else { return nil }
        return (by, object["time"]?.numberValue?.int64Value ?? 0)
    }

    // MARK: For people

    /// One code as a line shows it: `QR-Code SN-4711 → items/x` (`(new)`
    /// when no item has the code yet).
    public static func describe(_ code: Code) -> String {
        var text = "\(code.symbology) \(code.code)"
        if let name = code.name { text += " → \(name)\(code.found ? "" : " (new)")" }
        return text
    }

    /// The proposals as one phrase: `serials SN-4711; codes 400…; name "Drill"`.
    public static func describe(_ proposals: Proposals) -> String {
        var parts: [String] = []
        if !proposals.serials.isEmpty { parts.append("serials " + proposals.serials.joined(separator: ", ")) }
        if !proposals.codes.isEmpty { parts.append("codes " + proposals.codes.joined(separator: ", ")) }
        if let name = proposals.name { parts.append("name \"\(name)\"") }
        return parts.isEmpty ? "none" : parts.joined(separator: "; ")
    }

    /// The runner's line once the hub analysed: `analysed: 2 codes (QR-Code
    /// SN-4711 → items/x, …), proposals: serials SN-4711`, or why not.
    public var summaryLine: String {
        guard status == "done" else {
            return "analysed: \(status)\(reason.map { " (\($0))" } ?? ""), proposals: \(Self.describe(proposals))"
        }
        let found = codes
        var line = "analysed: \(found.count) code\(found.count == 1 ? "" : "s")"
        if !found.isEmpty { line += " (" + found.map(Self.describe).joined(separator: ", ") + ")" }
        if !text.isEmpty { line += ", \(text.count) text line\(text.count == 1 ? "" : "s")" }
        return line + ", proposals: \(Self.describe(proposals))"
    }

    /// `tally intake status`: the analysis under the job's stage lines.
    /// - Parameter job: the job's id, for the accept hint.
    public func statusLines(job: String) -> [String] {
        var head = "  analysis: \(status)"
        if let reason { head += " (\(reason))" }
        if let millis { head += ", \(millis) ms" }
        if let photoCount { head += ", \(photoCount) photo\(photoCount == 1 ? "" : "s")" }
        var lines = [head]
        for code in codes {
            lines.append("    code \(Self.describe(code))\(code.photo.map { " in photo \($0.prefix(12))" } ?? "")")
        }
        for line in text { lines.append("    text \"\(line)\"") }
        let proposals = proposals
        lines.append("    proposals: \(Self.describe(proposals))")
        if let accepted {
            lines.append("    accepted by \(accepted.by) at \(Self.utc(accepted.time))")
        } else if !proposals.isEmpty {
            lines.append("    not accepted: 'tally intake accept \(job)' writes them on the item")
        }
        return lines
    }

    /// Milliseconds since 1970 as `2024-05-01T12:00:00Z`.
    static func utc(_ millis: Int64) -> String {
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        var days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let rest = seconds - days * 86_400
        // Civil from days (Howard Hinnant's algorithm).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let doe = days - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(year)-\(two(month))-\(two(day))T\(two(rest / 3600)):\(two(rest / 60 % 60)):\(two(rest % 60))Z"
    }
}
