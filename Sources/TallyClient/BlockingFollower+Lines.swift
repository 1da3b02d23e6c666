import TallyProtocol

/// What `tally watch` prints for what the follower reports, built here
/// beside it (the CLI writes the lines).
extension BlockingFollower {
    /// The current state a subscribe reply holds: a line per record,
    /// `current NAME vVERSION: DATA`.
    public static func snapshotLines(_ reply: JSONObject) -> [String] {
        func line(_ record: JSONObject, _ value: JSONValue?) -> String {
            "current \(record["name"]?.stringValue ?? "") v\(record["version"].map { "\($0)" } ?? "?"): \((value ?? .null).serializedString)"
        }
        if case .object(let record)? = reply["record"] { return [line(record, record["data"] ?? record["value"])] }
        guard case .array(let records)? = reply["records"] else { return [] }
        return records.compactMap { $0.objectValue.map { line($0, $0["data"]) } }
    }

    /// After a resnapshot, each current record (or list) shaped like a push
    /// (`"op":"snapshot"`), so a JSON consumer can resynchronise.
    public static func snapshotPushes(_ reply: JSONObject) -> [JSONObject] {
        var records: [JSONValue] = reply["records"]?.arrayValue ?? []
        if let record = reply["record"], record != .null { records.append(record) }
        if let list = reply["list"], list != .null { records.append(list) }
        return records.compactMap { value in
            guard case .object(var record) = value else { return nil }
            record["op"] = "snapshot"
            return record
        }
    }

    /// A change (or event) as one line: seq, name, version, kind, then the
    /// path and the value it set, when it has them.
    public static func line(_ change: JSONObject) -> String {
        let name = change["name"]?.stringValue ?? change["list"]?.stringValue ?? change["topic"]?.stringValue ?? ""
        let kind = change["kind"]?.stringValue ?? change["op"]?.stringValue ?? ""
        var line = "\(change["seq"].map { "\($0)" } ?? "-") \(name) v\(change["version"].map { "\($0)" } ?? "-") \(kind)"
        if let path = change["path"]?.stringValue { line += " \(path)" }
        if let value = change["data"] ?? change["value"] ?? change["entries"] ?? change["entry"] { line += " \(value.serializedString)" }
        return line
    }
}
