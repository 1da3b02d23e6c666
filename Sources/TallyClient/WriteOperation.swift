import TallyProtocol

/// One write as the protocol spells it (PROTOCOL.md, "Record writes", "List
/// writes", "advance"), without `id` and `idem`, which belong to the message.
///
/// Built by the static functions; `version` is the version the write is
/// based on (a mismatch is refused with `conflict`; 0: must not exist).
public struct WriteOperation: Sendable, Equatable {
    /// The operation object, e.g. `{"op":"set","name":…,"data":…}`.
    public var json: JSONObject

    public init(json: JSONObject) { self.json = json }

    public var op: String { json["op"]?.stringValue ?? "" }
    /// The record's or list's name.
    public var name: String { (json["name"] ?? json["list"])?.stringValue ?? "" }

    private static func make(_ op: String, _ key: String, _ name: String, version: Int64?,
                             _ members: [(String, JSONValue?)] = []) -> WriteOperation {
        var object: JSONObject = ["op": .string(op), key: .string(name)]
        for (member, value) in members { if let value { object[member] = value } }
        if let version { object["version"] = .int(version) }
        return WriteOperation(json: object)
    }

    public static func set(_ name: String, data: JSONObject, version: Int64? = nil) -> WriteOperation {
        make("set", "name", name, version: version, [("data", .object(data))])
    }

    public static func set(_ name: String, path: String, value: JSONValue, version: Int64? = nil) -> WriteOperation {
        make("set", "name", name, version: version, [("path", .string(path)), ("value", value)])
    }

    /// An RFC 7396 merge patch (`null` removes a member); the record must exist.
    public static func merge(_ name: String, patch: JSONObject, version: Int64? = nil) -> WriteOperation {
        make("merge", "name", name, version: version, [("data", .object(patch))])
    }

    public static func delete(_ name: String, path: String? = nil, version: Int64? = nil) -> WriteOperation {
        make("delete", "name", name, version: version, [("path", path.map(JSONValue.string))])
    }

    public static func increment(_ name: String, path: String, by amount: JSONNumber = JSONNumber(1),
                                 version: Int64? = nil) -> WriteOperation {
        make("increment", "name", name, version: version, [("path", .string(path)), ("by", .number(amount))])
    }

    /// Moves a workflow record to another stage; `from` is the stage the
    /// caller believes it is in (a mismatch is a `conflict`).
    public static func advance(_ name: String, from: String? = nil, to: String? = nil, reason: String? = nil,
                               data: JSONObject? = nil, version: Int64? = nil) -> WriteOperation {
        make("advance", "name", name, version: version,
             [("from", from.map(JSONValue.string)), ("to", to.map(JSONValue.string)),
              ("reason", reason.map(JSONValue.string)), ("data", data.map(JSONValue.object))])
    }

    public static func addEntry(_ list: String, entry: String, at index: Int? = nil, version: Int64? = nil) -> WriteOperation {
        make("addEntry", "list", list, version: version,
             [("entry", .string(entry)), ("at", index.map { .int(Int64($0)) })])
    }

    public static func removeEntry(_ list: String, entry: String, at index: Int? = nil, version: Int64? = nil) -> WriteOperation {
        make("removeEntry", "list", list, version: version,
             [("entry", .string(entry)), ("at", index.map { .int(Int64($0)) })])
    }

    public static func setEntries(_ list: String, entries: [String], version: Int64? = nil) -> WriteOperation {
        make("setEntries", "list", list, version: version, [("entries", .array(entries.map(JSONValue.string)))])
    }

    public static func deleteList(_ list: String, version: Int64? = nil) -> WriteOperation {
        make("delete", "list", list, version: version)
    }
}
