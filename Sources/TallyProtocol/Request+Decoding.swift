/// Turning a parsed JSON message into a `Request`, with an error for every
/// way it can be wrong.
extension Request {
    public static let supportedProtocols = [1]
    public static let maxIdBytes = 128
    public static let maxIdempotencyKeyBytes = 256
    public static let maxOpsPerWrite = 1000
    public static let maxPageSize = 1000
    /// Most entries one page of a list carries (`get` with `limit`, and the
    /// default page of `get` and of a list subscription's snapshot).
    public static let maxListPage = 10_000

    /// Decodes one client message. The error's `details` carry nothing about
    /// the `id`; the caller echoes `id(of:)` so even a bad message's reply
    /// can be matched.
    public static func decode(_ message: JSONValue) throws(ProtocolError) -> Request {
        guard case .object(let object) = message else {
            throw ProtocolError(.badMessage, "a message must be a JSON object such as {\"op\":\"get\",\"name\":\"orders/42\"}")
        }
        let fields = Fields(object)
        let id = try fields.id()
        guard let opValue = object["op"] else {
            throw ProtocolError(.badMessage, "the message has no \"op\"; say what to do, e.g. \"op\":\"get\"")
        }
        guard case .string(let op) = opValue else { throw .badField("op", "\"op\" must be a string") }
        let operation: Operation
        var idempotencyKey: String?
        switch op {
        case "hello": operation = .hello(try fields.hello())
        case "get": operation = .get(try fields.getTarget())
        case "subscribe": operation = .subscribe(try fields.subscriptionTarget(), since: try fields.int("since", min: 0))
        case "unsubscribe": operation = .unsubscribe(try fields.subscriptionTarget())
        case "report":
            let outbox = try fields.int("outbox", min: 0)
            let seq = try fields.int("seq", min: 0)
            guard outbox != nil || seq != nil else {
                throw .badField("outbox", "\"report\" needs \"outbox\" (writes waiting to be sent) and/or \"seq\" (the last seq applied)")
            }
            operation = .report(outbox: outbox, seq: seq)
        case "publish":
            let topic = try fields.name("topic")
            guard let data = object["data"] else { throw .badField("data", "\"publish\" needs \"data\" (any JSON value)") }
            operation = .publish(topic: topic, data: data)
        case "write":
            guard let opsValue = object["ops"] else { throw .badField("ops", "\"write\" needs \"ops\": an array of writes") }
            guard case .array(let ops) = opsValue, !ops.isEmpty, ops.count <= maxOpsPerWrite else {
                throw .badField("ops", "\"ops\" must be an array of 1 to \(maxOpsPerWrite) writes")
            }
            var writes: [Write] = []
            writes.reserveCapacity(ops.count)
            for (index, element) in ops.enumerated() {
                guard case .object(let inner) = element, case .string(let innerOp)? = inner["op"] else {
                    throw ProtocolError(.badField, "ops[\(index)] must be an object with an \"op\"",
                                        details: ["field": .string("ops[\(index)]"), "index": .number(JSONNumber(index))])
                }
                do throws(ProtocolError) {
                    guard let write = try Fields(inner).write(op: innerOp) else {
                        throw ProtocolError(.unknownOp, "\"\(innerOp)\" is not a write; use set, merge, delete, increment, addEntry, removeEntry, setEntries or advance")
                    }
                    writes.append(write)
                } catch {
                    var error = error
                    error.details["index"] = .number(JSONNumber(index))
                    if case .string(let field)? = error.details["field"] {
                        error.details["field"] = .string("ops[\(index)].\(field)")
                    }
                    throw error
                }
            }
            operation = .write(writes, atomic: true)
        default:
            guard let write = try fields.write(op: op) else {
                throw ProtocolError(.unknownOp, "unknown op \"\(op)\"; use hello, get, subscribe, unsubscribe, set, merge, delete, increment, addEntry, removeEntry, setEntries, advance, write, publish or report")
            }
            operation = .write([write], atomic: false)
        }
        if case .write = operation { idempotencyKey = try fields.idempotencyKey() }
        return Request(id: id, operation: operation, idempotencyKey: idempotencyKey)
    }

    /// The `id` to echo, when the message is an object with a usable one.
    public static func id(of message: JSONValue) -> JSONValue? {
        guard case .object(let object) = message else { return nil }
        return try? Fields(object).id()
    }
}

/// Typed access to a message's members, each failure naming the field.
struct Fields {
    let object: JSONObject
    init(_ object: JSONObject) { self.object = object }

    func id() throws(ProtocolError) -> JSONValue? {
        guard let value = object["id"] else { return nil }
        switch value {
        case .string(let text) where text.utf8.count <= Request.maxIdBytes: return value
        case .number(let number) where number.isInteger: return value
        default: throw .badField("id", "\"id\" must be a string of at most \(Request.maxIdBytes) bytes or an integer")
        }
    }

    func string(_ field: String) throws(ProtocolError) -> String? {
        guard let value = object[field] else { return nil }
        guard case .string(let text) = value else { throw .badField(field, "\"\(field)\" must be a string") }
        return text
    }

    func bool(_ field: String) throws(ProtocolError) -> Bool? {
        guard let value = object[field] else { return nil }
        guard case .bool(let flag) = value else { throw .badField(field, "\"\(field)\" must be true or false") }
        return flag
    }

    func int(_ field: String, min: Int64, max: Int64 = .max) throws(ProtocolError) -> Int64? {
        guard let value = object[field] else { return nil }
        guard case .number(let number) = value, number.isInteger, let int = number.int64Value, int >= min, int <= max else {
            throw .badField(field, "\"\(field)\" must be an integer from \(min)\(max == .max ? " up" : " to \(max)")")
        }
        return int
    }

    func name(_ field: String) throws(ProtocolError) -> String {
        guard let name = try string(field) else { throw .badField(field, "\"\(field)\" is missing") }
        try Names.validate(name, field: field)
        return name
    }

    /// A path into a record: its first segment is a key, since a record's
    /// data is an object.
    func path(_ field: String = "path") throws(ProtocolError) -> RecordPath? {
        guard let text = try string(field) else { return nil }
        let path: RecordPath
        do { path = try RecordPath(parsing: text) } catch { throw .path(error, field: field) }
        if case .index? = path.segments.first {
            throw ProtocolError(.badPath, "\"\(field)\" must start with a key (a record's data is an object), e.g. \"items[0]\"",
                                details: ["field": .string(field), "offset": 0])
        }
        return path
    }

    func stage(_ field: String) throws(ProtocolError) -> String? {
        guard let stage = try string(field) else { return nil }
        guard !stage.isEmpty, stage.utf8.count <= Self.maxStageBytes else {
            throw .badField(field, "\"\(field)\" must be a stage name of 1 to \(Self.maxStageBytes) bytes")
        }
        return stage
    }

    func requiredPath() throws(ProtocolError) -> RecordPath {
        guard let path = try path() else { throw .badField("path", "\"path\" is missing, e.g. \"path\":\"items[0].qty\"") }
        return path
    }

    func objectData(_ field: String = "data") throws(ProtocolError) -> JSONObject {
        guard let value = object[field] else { throw .badField(field, "\"\(field)\" is missing; a record's data is a JSON object") }
        guard case .object(let data) = value else { throw .badField(field, "\"\(field)\" must be a JSON object") }
        return data
    }

    func idempotencyKey() throws(ProtocolError) -> String? {
        guard let key = try string("idem") else { return nil }
        guard !key.isEmpty, key.utf8.count <= Request.maxIdempotencyKeyBytes else {
            throw .badField("idem", "\"idem\" must be 1 to \(Request.maxIdempotencyKeyBytes) bytes")
        }
        return key
    }

    func hello() throws(ProtocolError) -> Hello {
        var protocols: [Int] = []
        switch object["protocol"] {
        case nil: protocols = [1]
        case .number(let number)?:
            guard let version = number.int64Value, number.isInteger, version > 0, version < 1000 else {
                throw .badField("protocol", "\"protocol\" must be a positive integer or an array of them")
            }
            protocols = [Int(version)]
        case .array(let values)? where !values.isEmpty && values.count <= 16:
            for value in values {
                guard case .number(let number) = value, number.isInteger, let version = number.int64Value,
                      version > 0, version < 1000 else {
                    throw .badField("protocol", "\"protocol\" must be a positive integer or an array of them")
                }
                protocols.append(Int(version))
            }
        default: throw .badField("protocol", "\"protocol\" must be a positive integer or an array of them")
        }
        let client = try string("client")
        if let client, client.utf8.count > 128 { throw .badField("client", "\"client\" must be at most 128 bytes") }
        var hello = Hello(protocols: protocols, client: client, token: try string("token"), since: try int("since", min: 0))
        hello.outbox = try int("outbox", min: 0)
        return hello
    }

    func getTarget() throws(ProtocolError) -> GetTarget {
        switch try targetField(allowed: ["name", "list", "prefix", "query"], op: "get") {
        case "name": return .record(try name("name"), path: try path())
        case "list":
            if object["after"] != nil {
                throw .badField("after", "a list is paged with \"cursor\" (from the previous page), not \"after\"")
            }
            let limit = try int("limit", min: 1, max: Int64(Request.maxListPage))
            return .list(try name("list"), cursor: try Request.listCursor(try string("cursor")), limit: limit.map { Int($0) })
        case "query":
            let limit = try int("limit", min: 1, max: Int64(Request.maxPageSize)) ?? Int64(Request.maxPageSize)
            return .query(try query(), after: try string("after"), limit: Int(limit))
        default:
            let prefix = try string("prefix") ?? ""
            try Names.validatePrefix(prefix, field: "prefix")
            let after = try string("after")
            let limit = try int("limit", min: 1, max: Int64(Request.maxPageSize)) ?? Int64(Request.maxPageSize)
            return .prefix(prefix, after: after, limit: Int(limit))
        }
    }

    func subscriptionTarget() throws(ProtocolError) -> SubscriptionTarget {
        switch try targetField(allowed: ["name", "list", "prefix", "topic", "query"], op: "subscribe") {
        case "name":
            let record = try name("name")
            if let path = try path() { return .path(record, path) }
            return .record(record)
        case "list": return .list(try name("list"))
        case "topic": return .topic(try name("topic"))
        case "query": return .query(try query())
        default:
            let prefix = try string("prefix") ?? ""
            try Names.validatePrefix(prefix, field: "prefix")
            return .prefix(prefix)
        }
    }

    /// Which one of `allowed` the message names; exactly one must be present.
    private func targetField(allowed: [String], op: String) throws(ProtocolError) -> String {
        let present = allowed.filter { object[$0] != nil }
        guard present.count == 1 else {
            let options = allowed.map { "\"\($0)\"" }.joined(separator: ", ")
            throw .badField(present.first ?? allowed[0],
                            present.isEmpty ? "\"\(op)\" needs one of \(options)" : "\"\(op)\" takes only one of \(options)")
        }
        return present[0]
    }

    /// The write named `op`, or nil when `op` is not a write.
    static let writeOps: Set<String> = ["set", "merge", "delete", "increment", "addEntry", "removeEntry", "setEntries", "advance"]
    static let maxReasonBytes = 1024
    static let maxStageBytes = 128

    func write(op: String) throws(ProtocolError) -> Write? {
        guard Self.writeOps.contains(op) else { return nil }
        let base = try int("version", min: 0)
        switch op {
        case "set":
            let record = try name("name")
            let checkStock = try bool("checkStock") ?? false
            if let path = try path() {
                guard let value = object["value"] else { throw .badField("value", "a \"set\" at a path needs \"value\"") }
                if checkStock {
                    throw .badField("checkStock", "\"checkStock\" goes with a whole-record set that creates an order, not with a set at a path")
                }
                return Write(name: record, action: .setPath(path, value), baseVersion: base)
            }
            var write = Write(name: record, action: .set(try objectData()), baseVersion: base)
            write.checkStock = checkStock
            return write
        case "merge":
            return Write(name: try name("name"), action: .merge(try objectData()), baseVersion: base)
        case "delete":
            if object["list"] != nil, object["name"] == nil {
                return Write(name: try name("list"), action: .deleteList, baseVersion: base)
            }
            let record = try name("name")
            if let path = try path() { return Write(name: record, action: .deletePath(path), baseVersion: base) }
            return Write(name: record, action: .delete, baseVersion: base)
        case "increment":
            let record = try name("name")
            let path = try requiredPath()
            var by = JSONNumber(1)
            if let value = object["by"] {
                guard case .number(let number) = value else { throw .badField("by", "\"by\" must be a number") }
                by = number
            }
            return Write(name: record, action: .increment(path, by: by), baseVersion: base)
        case "addEntry":
            let at = try int("at", min: 0, max: Int64(RecordPath.maxIndex)).map(Int.init)
            return Write(name: try name("list"), action: .addEntry(try name("entry"), at: at), baseVersion: base)
        case "removeEntry":
            let at = try int("at", min: 0, max: Int64(RecordPath.maxIndex)).map(Int.init)
            return Write(name: try name("list"), action: .removeEntry(try name("entry"), at: at), baseVersion: base)
        case "advance":
            let record = try name("name")
            var step = Advance(from: try stage("from"), to: try stage("to"), reason: try string("reason"))
            if let reason = step.reason, reason.isEmpty || reason.utf8.count > Self.maxReasonBytes {
                throw .badField("reason", "\"reason\" must be 1 to \(Self.maxReasonBytes) bytes")
            }
            if object["data"] != nil { step.data = try objectData() }
            return Write(name: record, action: .advance(step), baseVersion: base)
        case "setEntries":
            guard let value = object["entries"] else { throw .badField("entries", "\"setEntries\" needs \"entries\": an array of record names") }
            guard case .array(let values) = value else { throw .badField("entries", "\"entries\" must be an array of record names") }
            var entries: [String] = []
            entries.reserveCapacity(values.count)
            for (index, value) in values.enumerated() {
                guard case .string(let entry) = value else { throw .badField("entries[\(index)]", "entries[\(index)] must be a string") }
                try Names.validate(entry, field: "entries[\(index)]")
                entries.append(entry)
            }
            return Write(name: try name("list"), action: .setEntries(entries), baseVersion: base)
        default:
            return nil
        }
    }
}

extension Request {
    /// The key a list page's `cursor` names (the hex of PROTOCOL.md, "get").
    public static func listCursor(_ text: String?) throws(ProtocolError) -> ListKey? {
        guard let text else { return nil }
        guard let key = ListKey(hex: text) else {
            throw .badField("cursor", "\"cursor\" must be the \"cursor\" of a previous page of the list (lower-case hex)")
        }
        return key
    }
}
