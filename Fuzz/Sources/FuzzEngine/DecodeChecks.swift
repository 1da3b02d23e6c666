// Checks on `Request.decode`: what a refusal must carry, and that what is
// accepted says what the message said (PROTOCOL.md, "Client messages").
import FuzzSupport
import TallyEngine
import TallyProtocol

let decodeErrorCodes: Set<String> = ["bad_message", "unknown_op", "bad_field", "bad_name", "bad_path"]

/// The member a `field` detail names: `name`, `entries[2]`, `ops[1].path`,
/// `ops[0].entries[3]`, `ops[4]`.
func resolveField(_ field: String, in object: JSONObject) -> JSONValue? {
    var rest = Substring(field)
    var current = JSONValue.object(object)
    while !rest.isEmpty {
        let end = rest.firstIndex(of: ".") ?? rest.endIndex
        let part = rest[..<end]
        rest = end < rest.endIndex ? rest[rest.index(after: end)...] : ""
        if let open = part.firstIndex(of: "["), part.last == "]" {
            let key = String(part[..<open])
            guard let index = Int(part[part.index(after: open)..<part.index(before: part.endIndex)]),
                  case .array(let array)? = current[key], index >= 0, index < array.count else { return nil }
            current = array[index]
        } else {
            guard let next = current[String(part)] else { return nil }
            current = next
        }
    }
    return current
}

func checkDecodeError(_ error: ProtocolError, message value: JSONValue) {
    let code = error.code.rawValue
    check(decodeErrorCodes.contains(code), "decoding failed with \(code), not a decoding error: \(error)")
    check(!error.message.isEmpty, "decoding error \(code) without a message")
    guard case .object(let object) = value else {
        check(code == "bad_message", "a non-object message gave \(code), not bad_message")
        return
    }
    let field = error.details["field"]
    if code == "bad_field" || code == "bad_name" || code == "bad_path" {
        guard case .string(let name)? = field, !name.isEmpty else {
            check(false, "\(code) without a \"field\" detail: \(error.json)")
            return
        }
        if code == "bad_name" {
            // The named member exists, is a string, and breaks the name rules.
            guard case .string(let text)? = resolveField(name, in: object) else {
                check(false, "bad_name names \(name), which is not a string member of \(value)")
                return
            }
            let isPrefix = name == "prefix" || name.hasSuffix(".prefix")
            check(!modelValidName(Bytes(text.utf8), prefix: isPrefix),
                  "bad_name for \(name) = \(text.debugDescription), which follows the name rules")
        }
        if code == "bad_path", case .number(let offset)? = error.details["offset"] {
            if case .string(let text)? = resolveField(name, in: object) {
                let scalars = text.unicodeScalars.count
                check(offset.isInteger && (offset.int64Value ?? -1) >= 0 && (offset.int64Value ?? .max) <= scalars,
                      "bad_path offset \(offset) outside \(name) (\(scalars) scalars)")
            }
        }
    }
    // Errors inside `write`'s ops name the op.
    if case .string("write")? = object["op"], case .array(let ops)? = object["ops"],
       case .number(let index)? = error.details["index"] {
        guard let i = index.int64Value, index.isInteger, i >= 0, i < ops.count else {
            check(false, "index \(index) outside ops (\(ops.count))")
            return
        }
        if case .string(let name)? = field {
            check(name.hasPrefix("ops[\(i)]"), "error for ops[\(i)] names field \(name)")
        }
    } else {
        check(error.details["index"] == nil || object["op"] == .string("write"),
              "a single message's error carries an index: \(error.json)")
    }
}

/// The path member `field` of `object` decoded to `path`: its canonical text
/// is the text sent, it starts with a key and is within the limits.
func checkPath(_ path: RecordPath, field: String, in object: JSONObject) {
    guard case .string(let text)? = object[field] else {
        check(false, "decoded a path without a \(field) string")
        return
    }
    check(path.description.utf8.elementsEqual(text.utf8), "path \(text.debugDescription) decoded to \(path.description.debugDescription)")
    check(!path.segments.isEmpty && path.segments.count <= RecordPath.maxSegments, "path with \(path.segments.count) segments")
    check(text.utf8.count <= RecordPath.maxBytes, "path of \(text.utf8.count) bytes accepted")
    if case .index? = path.segments.first { check(false, "path starting with an index accepted: \(text)") }
    for case .index(let index) in path.segments {
        check(index >= 0 && index <= RecordPath.maxIndex, "index \(index) accepted")
    }
}

func checkName(_ name: String, field: String, in object: JSONObject, prefix: Bool = false) {
    check(modelValidName(Bytes(name.utf8), prefix: prefix), "accepted \(field) \(name.debugDescription)")
    if case .string(let sent)? = object[field] {
        check(sent.utf8.elementsEqual(name.utf8), "\(field) \(sent.debugDescription) decoded as \(name.debugDescription)")
    } else {
        check(prefix && name.isEmpty, "decoded \(field) \(name.debugDescription) that the message does not carry")
    }
}

func int64(_ value: JSONValue?) -> Int64? {
    guard case .number(let number)? = value, number.isInteger else { return nil }
    return number.int64Value
}

/// The write decoded from one op object says what the object said.
func checkWrite(_ write: Write, op: String, object: JSONObject) {
    check(write.baseVersion == int64(object["version"]), "version \(String(describing: object["version"])) decoded as \(String(describing: write.baseVersion))")
    if let base = write.baseVersion { check(base >= 0, "negative version \(base) accepted") }
    func entry(_ text: String) { checkName(text, field: "entry", in: object) }
    switch (op, write.action) {
    case ("set", .set(let data)):
        check(object["path"] == nil, "set with a path decoded as a whole set")
        check(object["data"] == .object(data), "set's data changed in decoding")
        checkName(write.name, field: "name", in: object)
    case ("set", .setPath(let path, let value)):
        checkPath(path, field: "path", in: object)
        check(object["value"] == value, "set's value changed in decoding")
        checkName(write.name, field: "name", in: object)
    case ("merge", .merge(let data)):
        check(object["data"] == .object(data), "merge's data changed in decoding")
        checkName(write.name, field: "name", in: object)
    case ("delete", .delete):
        check(object["path"] == nil, "delete with a path decoded as a record delete")
        checkName(write.name, field: "name", in: object)
    case ("delete", .deletePath(let path)):
        checkPath(path, field: "path", in: object)
        checkName(write.name, field: "name", in: object)
    case ("delete", .deleteList):
        check(object["name"] == nil, "delete with a name decoded as a list delete")
        checkName(write.name, field: "list", in: object)
    case ("increment", .increment(let path, let by)):
        checkPath(path, field: "path", in: object)
        check((object["by"] ?? .number(JSONNumber(1))) == .number(by), "increment's by changed in decoding")
        checkName(write.name, field: "name", in: object)
    case ("addEntry", .addEntry(let text, let at)), ("removeEntry", .removeEntry(let text, let at)):
        entry(text)
        check(at.map(Int64.init) == int64(object["at"]), "at changed in decoding")
        checkName(write.name, field: "list", in: object)
    case ("setEntries", .setEntries(let entries)):
        guard case .array(let sent)? = object["entries"], sent.count == entries.count else {
            check(false, "setEntries decoded \(entries.count) entries from \(String(describing: object["entries"]))")
            return
        }
        for (text, value) in zip(entries, sent) {
            check(modelValidName(Bytes(text.utf8)), "accepted entry \(text.debugDescription)")
            check(value == .string(text), "entry \(value) decoded as \(text.debugDescription)")
        }
        checkName(write.name, field: "list", in: object)
    case ("advance", .advance(let step)):
        check(object["from"] == step.from.map(JSONValue.string) && object["to"] == step.to.map(JSONValue.string),
              "advance's from/to changed in decoding")
        check(object["reason"] == step.reason.map(JSONValue.string), "advance's reason changed in decoding")
        check(object["data"] == step.data.map(JSONValue.object), "advance's data changed in decoding")
        checkName(write.name, field: "name", in: object)
    default:
        check(false, "op \(op) decoded as \(write.action)")
    }
}

func checkTarget(_ target: SubscriptionTarget, object: JSONObject) {
    let present = ["name", "list", "prefix", "topic", "query"].filter { object[$0] != nil }
    check(present.count == 1, "a subscription target decoded from members \(present)")
    switch target {
    case .record(let name):
        check(object["path"] == nil, "a subscription with a path decoded as a record subscription")
        checkName(name, field: "name", in: object)
    case .path(let name, let path):
        checkName(name, field: "name", in: object)
        checkPath(path, field: "path", in: object)
    case .list(let name): checkName(name, field: "list", in: object)
    case .topic(let name): checkName(name, field: "topic", in: object)
    case .prefix(let prefix): checkName(prefix, field: "prefix", in: object, prefix: true)
    case .query(let query): checkQuery(query, in: object)
    }
}

/// A decoded live query says what its `query` member said.
func checkQuery(_ query: Query, in object: JSONObject) {
    guard case .object(let given)? = object["query"] else { return check(false, "a query decoded without a query object") }
    checkName(query.prefix, field: "prefix", in: given, prefix: true)
    check(!query.conditions.isEmpty && query.conditions.count <= Query.maxConditions, "\(query.conditions.count) conditions")
    check(query.conditions.allSatisfy { !$0.values.isEmpty && $0.values.count <= Query.maxValues }, "a condition's values")
    check(query.limit.map { $0 >= 1 && $0 <= Query.maxLimit } ?? true, "query limit \(String(describing: query.limit))")
    check((query.order != nil) == (query.limit != nil), "an order without a limit, or a limit without one")
    check(query.owner == nil, "a decoded query names an owner")
}

/// A decoded request says what its message said.
func checkDecoded(_ request: Request, message: JSONValue) {
    guard case .object(let object) = message, case .string(let op)? = object["op"] else {
        check(false, "decoded a message without a string op: \(message)")
        return
    }
    check(request.id == object["id"], "id \(String(describing: object["id"])) decoded as \(String(describing: request.id))")
    check(Request.id(of: message) == request.id, "Request.id(of:) disagrees with decode")
    if let id = request.id {
        switch id {
        case .string(let text): check(text.utf8.count <= Request.maxIdBytes, "id of \(text.utf8.count) bytes")
        case .number(let number): check(number.isInteger, "non-integer id \(number)")
        default: check(false, "id \(id) is neither a string nor an integer")
        }
    }
    if case .write = request.operation {
        check(request.idempotencyKey.map { JSONValue.string($0) } == object["idem"], "idem changed in decoding")
        if let key = request.idempotencyKey {
            check(!key.isEmpty && key.utf8.count <= Request.maxIdempotencyKeyBytes, "idem of \(key.utf8.count) bytes")
        }
    } else {
        check(request.idempotencyKey == nil, "an idempotency key on a non-write")
    }
    switch request.operation {
    case .hello(let hello):
        check(op == "hello", "op \(op) decoded as hello")
        check(!hello.protocols.isEmpty && hello.protocols.count <= 16 && hello.protocols.allSatisfy { $0 > 0 && $0 < 1000 },
              "protocols \(hello.protocols)")
        if let client = hello.client { check(client.utf8.count <= 128, "client of \(client.utf8.count) bytes") }
        if let since = hello.since { check(since >= 0, "negative since") }
    case .get(let target):
        check(op == "get", "op \(op) decoded as get")
        switch target {
        case .record(let name, let path):
            checkName(name, field: "name", in: object)
            if let path { checkPath(path, field: "path", in: object) } else { check(object["path"] == nil, "get lost its path") }
        case .list(let name, let cursor, let limit):
            checkName(name, field: "list", in: object)
            check(limit.map { $0 >= 1 && $0 <= Request.maxListPage } ?? (object["limit"] == nil), "list page limit \(String(describing: limit))")
            check(cursor.map { object["cursor"] == .string($0.description) } ?? (object["cursor"] == nil),
                  "list cursor \(String(describing: cursor)) from \(String(describing: object["cursor"]))")
        case .prefix(let prefix, _, let limit):
            checkName(prefix, field: "prefix", in: object, prefix: true)
            check(limit >= 1 && limit <= Request.maxPageSize, "limit \(limit)")
        case .query(let query, _, let limit):
            checkQuery(query, in: object)
            check(limit >= 1 && limit <= Request.maxPageSize, "limit \(limit)")
        }
    case .subscribe(let target, let since):
        check(op == "subscribe", "op \(op) decoded as subscribe")
        checkTarget(target, object: object)
        check(since == int64(object["since"]), "since changed in decoding")
    case .unsubscribe(let target):
        check(op == "unsubscribe", "op \(op) decoded as unsubscribe")
        checkTarget(target, object: object)
    case .report(let outbox, let seq):
        check(op == "report", "op \(op) decoded as report")
        check(outbox == int64(object["outbox"]) && seq == int64(object["seq"]), "report's members changed in decoding")
        check(outbox != nil || seq != nil, "an empty report accepted")
    case .publish(let topic, let data):
        check(op == "publish", "op \(op) decoded as publish")
        checkName(topic, field: "topic", in: object)
        check(object["data"] == data, "publish's data changed in decoding")
    case .write(let writes, let atomic):
        if op == "write" {
            check(atomic, "write decoded as non-atomic")
            guard case .array(let ops)? = object["ops"], ops.count == writes.count else {
                check(false, "write decoded \(writes.count) writes from \(String(describing: object["ops"]))")
                return
            }
            check(!ops.isEmpty && ops.count <= Request.maxOpsPerWrite, "write with \(ops.count) ops accepted")
            for (write, value) in zip(writes, ops) {
                guard case .object(let inner) = value, case .string(let innerOp)? = inner["op"] else {
                    check(false, "an op that is not an object with an op was accepted: \(value)")
                    continue
                }
                checkWrite(write, op: innerOp, object: inner)
            }
        } else {
            check(!atomic && writes.count == 1, "\(op) decoded as \(writes.count) writes, atomic \(atomic)")
            checkWrite(writes[0], op: op, object: object)
        }
    }
}

/// Decodes `message`, checking the result either way; an unknown member
/// changes nothing (PROTOCOL.md: "Unknown members are ignored").
func decode(_ message: JSONValue) -> Request? {
    let result = Result { () throws(ProtocolError) -> Request in try Request.decode(message) }
    if case .object(var object) = message, object["~fuzz"] == nil {
        object["~fuzz"] = .array([.null, .object([:])])
        let extended = Result { () throws(ProtocolError) -> Request in try Request.decode(.object(object)) }
        switch (result, extended) {
        case (.success(let a), .success(let b)):
            check(a == b, "an unknown member changed the decoded request")
        case (.failure(let a), .failure(let b)):
            check(a == b, "an unknown member changed the error: \(a) / \(b)")
        default:
            check(false, "an unknown member changed whether \(message) decodes")
        }
    }
    switch result {
    case .success(let request):
        checkDecoded(request, message: message)
        return request
    case .failure(let error):
        checkDecodeError(error, message: message)
        trace("  refused: \(error.json)")
        return nil
    }
}
