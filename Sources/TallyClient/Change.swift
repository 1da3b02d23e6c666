import TallyProtocol

/// What a change did (PROTOCOL.md, "Pushes"). Open-ended: a kind a newer
/// hub sends still decodes.
public struct ChangeKind: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let set = ChangeKind(rawValue: "set")
    public static let setPath = ChangeKind(rawValue: "setPath")
    public static let deletePath = ChangeKind(rawValue: "deletePath")
    public static let delete = ChangeKind(rawValue: "delete")
    public static let addEntry = ChangeKind(rawValue: "addEntry")
    public static let removeEntry = ChangeKind(rawValue: "removeEntry")
    public static let setEntries = ChangeKind(rawValue: "setEntries")
}

/// One change push: `{"op":"change","seq","time","name"|"list","version","kind",…}`.
public struct Change: Sendable, Equatable {
    public enum Target: Sendable, Hashable {
        case record(String)
        case list(String)
    }

    public var seq: Int64
    public var time: Int64?
    public var target: Target
    /// The record's or list's version after the change.
    public var version: Int64
    public var kind: ChangeKind
    /// The push as it came, for members this type does not name.
    public var json: JSONObject

    public init?(push: JSONObject) {
        guard let seq = push["seq"]?.int64, let kindText = push["kind"]?.stringValue else { return nil }
        if let name = push["name"]?.stringValue {
            target = .record(name)
        } else if let list = push["list"]?.stringValue {
            target = .list(list)
        } else {
            return nil
        }
        self.seq = seq
        time = push["time"]?.int64
        version = push["version"]?.int64 ?? 0
        kind = ChangeKind(rawValue: kindText)
        json = push
    }

    /// The record's or list's name.
    public var name: String {
        switch target {
        case .record(let name), .list(let name): name
        }
    }

    public var isList: Bool { if case .list = target { true } else { false } }
    /// `set`: the record's whole new data.
    public var data: JSONObject? { json["data"]?.objectValue }
    /// `setPath`, `deletePath`: where.
    public var path: String? { json["path"]?.stringValue }
    /// `setPath`: the new value.
    public var value: JSONValue? { json["value"] }

    /// The record's data after this change, given its data before it (nil:
    /// the record does not exist). A path change to a record this copy does
    /// not have starts from `{}`, as the hub's own path writes create records.
    public func applied(to record: JSONObject?) throws(ProtocolError) -> JSONObject? {
        switch kind {
        case .set:
            return data ?? [:]
        case .delete:
            return nil
        case .setPath, .deletePath:
            guard let pathText = path else { throw ProtocolError(.badReply, "a \(kind) push without a path") }
            let parsed: RecordPath
            do { parsed = try RecordPath(parsing: pathText) } catch { throw .path(error) }
            let current = JSONValue.object(record ?? [:])
            let next: JSONValue
            do {
                if kind == .setPath {
                    next = try current.setting(value ?? .null, at: parsed)
                } else {
                    guard current.value(at: parsed) != nil else { return record }
                    next = try current.removing(at: parsed)
                }
            } catch {
                throw .path(error)
            }
            return next.objectValue ?? [:]
        default:
            throw ProtocolError(.badReply, "a record change of kind \(kind) this client does not know")
        }
    }

    /// The list's entries after this change, given them before (nil: the
    /// list does not exist).
    public func applied(toEntries entries: [String]?) throws(ProtocolError) -> [String]? {
        switch kind {
        case .setEntries:
            return (json["entries"]?.arrayValue ?? []).compactMap(\.stringValue)
        case .delete:
            return nil
        case .addEntry:
            guard let entry = json["entry"]?.stringValue else { throw ProtocolError(.badReply, "addEntry without entry") }
            var list = entries ?? []
            let index = json["index"]?.int64.map { Int($0) } ?? list.count
            list.insert(entry, at: min(max(0, index), list.count))
            return list
        case .removeEntry:
            var list = entries ?? []
            let indexes = (json["indexes"]?.arrayValue ?? []).compactMap { $0.int64.map { Int($0) } }
            for index in indexes.sorted(by: >) where index < list.count { list.remove(at: index) }
            return list
        default:
            throw ProtocolError(.badReply, "a list change of kind \(kind) this client does not know")
        }
    }
}
