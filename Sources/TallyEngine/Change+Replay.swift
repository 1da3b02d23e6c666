import TallyProtocol

extension Change {
    /// A record change another hub made, rebuilt from its push message and
    /// the record as it was before (`prior`, nil when it did not exist):
    /// the same `Change` the engine built on that hub, so that path
    /// subscriptions, live queries and workflow stats here can tell what it
    /// did. `message` is kept as the push, byte for byte.
    ///
    /// The push says everything the change did (PROTOCOL.md, "Pushes"): a
    /// `set` the whole new data, `setPath` the value now at a path,
    /// `deletePath` a path removed, `delete` the record gone. The version
    /// and seq are the push's; the record was updated at the push's time
    /// and created then when it did not exist before.
    ///
    /// - Throws: `.storageFailed` when the message is not a record change
    ///   this hub can read, or does not fit `prior` (a damaged log).
    public static func replaying(_ push: JSONObject, message: [UInt8],
                                 prior: RecordState?) throws(ProtocolError) -> Change {
        func damaged(_ why: String) -> ProtocolError {
            ProtocolError(.storageFailed, "a logged change cannot be replayed: \(why)")
        }
        guard push["op"]?.stringValue == "change", let name = push["name"]?.stringValue,
              let seq = push["seq"]?.numberValue?.int64Value, let time = push["time"]?.numberValue?.int64Value,
              let version = push["version"]?.numberValue?.int64Value, let kind = push["kind"]?.stringValue else {
            throw damaged("not a record change message")
        }
        func path() throws(ProtocolError) -> RecordPath {
            guard let text = push["path"]?.stringValue else { throw damaged("\(kind) of \"\(name)\" without a path") }
            do { return try RecordPath(parsing: text) } catch { throw damaged("bad path \"\(text)\" of \"\(name)\"") }
        }
        let root = JSONValue.object(prior?.data ?? [:])
        func edited(_ edit: () throws(RecordPathError) -> JSONValue) throws(ProtocolError) -> JSONObject? {
            do {
                return try edit().objectValue
            } catch {
                throw damaged("\(kind) of \"\(name)\" does not fit the record it changed (\(error))")
            }
        }
        let data: JSONObject?
        var scope = RecordScope.whole
        switch kind {
        case "set":
            guard case .object(let object)? = push["data"] else { throw damaged("set of \"\(name)\" without data") }
            data = object
        case "setPath":
            let at = try path()
            guard let value = push["value"] else { throw damaged("setPath of \"\(name)\" without a value") }
            data = try edited { () throws(RecordPathError) in try root.setting(value, at: at) }
            scope = .path(at)
        case "deletePath":
            let at = try path()
            data = try edited { () throws(RecordPathError) in try root.removing(at: at) }
            scope = .path(at)
        case "delete":
            data = nil
        default:
            throw damaged("unknown kind \"\(kind)\" of \"\(name)\"")
        }
        let after = data.map { data in
            RecordState(name: name, version: version, seq: seq, created: prior?.created ?? time, updated: time,
                        data: data, dataBytes: JSONValue.object(data).serialized())
        }
        var reply: JSONObject = ["name": .string(name), "version": .number(JSONNumber(version)),
                                 "seq": .number(JSONNumber(seq))]
        if case .path(let at) = scope, let value = after.map({ JSONValue.object($0.data) })?.value(at: at) {
            reply["value"] = value
        }
        return Change(seq: seq, time: time, name: name, target: .record(before: prior, after: after, scope: scope),
                      push: message, reply: reply)
    }
}
