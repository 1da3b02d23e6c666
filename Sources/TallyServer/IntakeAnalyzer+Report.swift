import TallyProtocol

/// The `analysis` object an intake record gets with its move to `analyzed`
/// (Protocol/PROTOCOL.md, "Intake"): pure, from the outcome, what each code
/// resolves to and the job's item.
extension IntakeAnalysisOutcome {
    /// What `/v1/resolve` makes of a code: the existing item (`found`) or
    /// the name a new item for it would get.
    struct Resolution: Sendable, Equatable {
        var found: Bool
        var name: String
    }

    /// Most codes and text lines kept on the record: a photo of a shelf of
    /// labels must not make the record huge.
    static let maxCodes = 100
    static let maxLines = 100
    static let maxLineBytes = 200

    /// - Parameters:
    ///   - resolve: the resolution of a code's text.
    ///   - itemKeys: the lookup keys (`HubCore.lookupKey`) of the job's
    ///     item's id, SKU, serials and codes; empty when it has no item.
    ///   - item: the job's item name, nil when none.
    ///   - key: a code's lookup key.
    func analysis(settings: AnalysisSettings, resolve: (String) -> Resolution, item: String?,
                  itemKeys: Set<String>, key: (String) -> String) -> JSONObject {
        var object: JSONObject = ["status": .string(status.rawValue)]
        if let reason { object["reason"] = .string(reason) }
        object["millis"] = .number(JSONNumber(millis))
        object["photos"] = .array(photos.map { photo in
            var entry: JSONObject = ["sha256": .string(photo.sha256), "codes": .number(JSONNumber(photo.codes)),
                                     "millis": .number(JSONNumber(photo.millis))]
            if let error = photo.error { entry["error"] = .string(error) }
            return .object(entry)
        })
        let serialRules = settings.serialPatterns.compactMap { try? Regex($0) }
        let nameRules = settings.namePatterns.compactMap { try? Regex($0) }
        var serials: [String] = []
        var proposedCodes: [String] = []
        var codeEntries: [JSONValue] = []
        for code in codes.prefix(Self.maxCodes) {
            let text = code.found.text
            let resolution = resolve(text)
            codeEntries.append(.object(["code": .string(text), "symbology": .string(code.found.symbology),
                                        "photo": .string(code.photo), "found": .bool(resolution.found),
                                        "name": .string(resolution.name)]))
            if serialRules.contains(where: { (try? $0.wholeMatch(in: text)) != nil }) {
                if !serials.contains(text) { serials.append(text) }
            } else if !itemKeys.contains(key(text)), !resolution.found || resolution.name == item,
                      !proposedCodes.contains(text) {
                // A code another item has already names that item: not proposed.
                proposedCodes.append(text)
            }
        }
        object["codes"] = .array(codeEntries)
        var name: String?
        if let text {
            let lines = text.prefix(Self.maxLines).map { String(decoding: Array($0.utf8.prefix(Self.maxLineBytes)), as: UTF8.self) }
            object["text"] = .array(lines.map(JSONValue.string))
            for line in lines {
                for rule in serialRules {
                    guard let match = try? rule.firstMatch(in: line) else { continue }
                    let serial = String(line[match.range])
                    if !serials.contains(serial) { serials.append(serial) }
                }
                if name == nil, nameRules.contains(where: { (try? $0.firstMatch(in: line)) != nil }) { name = line }
            }
        }
        var proposals: JSONObject = ["serials": .array(serials.map(JSONValue.string)),
                                     "codes": .array(proposedCodes.map(JSONValue.string))]
        if let name { proposals["name"] = .string(name) }
        object["proposals"] = .object(proposals)
        return object
    }
}
