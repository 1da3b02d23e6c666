// libFuzzer target for request decoding and the pure sync engine:
// `Request.decode` (TallyProtocol), `Engine.apply`, `SubscriptionRegistry`
// and `PathReplay` (TallyEngine).
//
// Input layout:
//   byte 0  config: bits 0-1 JSON limits preset for the messages (small /
//           tiny / protocol defaults / small but 64 deep); bits 2-3 engine
//           limits preset (4 KiB records and setEntries of 16 / 256 B and 4 /
//           64 B and 1 / defaults); bit 4 reads of names starting "fail"
//           throw storage_failed; bits 5-6 where the partial-log PathReplay
//           filters start; bit 7 the clock stands still between messages
//   rest    client messages, one JSON text per line (at most 64 lines)
//
// Every message is parsed with `JSONValue.parse` and decoded with
// `Request.decode`; writes go through `Engine.apply` against a dictionary
// state, subscribe/unsubscribe/hello change a `SubscriptionRegistry` for one
// of four slots (the message's id picks it), and every change is matched
// against the registry and fed to PathReplay filters. Invariants: see
// Fuzz/README.md ("FuzzEngine").
import FuzzSupport
import TallyEngine
import TallyProtocol

@_cdecl("FuzzEngine_main")
func fuzzEngineMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzerDriver(argc: argc, argv: argv) { data, size in
        var input = FuzzInput(data, size)
        var session = Session(config: Config(input.byte()))
        session.run(Array(input.rest))
        return 0
    }
}

struct Config {
    var messageLimits = JSONLimits()
    var engineLimits = EngineLimits(maxRecordBytes: 4096, maxListEntries: 16)
    var failingReads: Bool
    var lateStart: Int
    var clockStep: Int64

    init(_ byte: UInt8) {
        switch byte & 3 {
        case 0: messageLimits = JSONLimits(maxDepth: 8, maxStringBytes: 64, maxArrayElements: 16, maxObjectMembers: 16)
        case 1: messageLimits = JSONLimits(maxDepth: 5, maxStringBytes: 16, maxArrayElements: 4, maxObjectMembers: 8)
        case 2: messageLimits = JSONLimits()
        default: messageLimits = JSONLimits(maxDepth: 64, maxStringBytes: 64, maxArrayElements: 16, maxObjectMembers: 16)
        }
        switch (byte >> 2) & 3 {
        case 0: engineLimits = EngineLimits(maxRecordBytes: 4096, maxListEntries: 16)
        case 1: engineLimits = EngineLimits(maxRecordBytes: 256, maxListEntries: 4)
        case 2: engineLimits = EngineLimits(maxRecordBytes: 64, maxListEntries: 1)
        default: engineLimits = EngineLimits()
        }
        failingReads = byte & 0x10 != 0
        lateStart = Int((byte >> 5) & 3)
        clockStep = byte & 0x80 != 0 ? 0 : 1
    }
}

/// The engine's view of storage: dictionaries keyed by the names' bytes.
struct FuzzState: EngineState {
    var records: [Bytes: RecordState] = [:]
    var lists: [Bytes: ListState] = [:]
    /// Each list's entries with their order keys.
    var listRows: [Bytes: SortedListRows] = [:]
    var failingReads = false

    mutating func record(_ name: String) throws(ProtocolError) -> RecordState? {
        if Model.readFails(Bytes(name.utf8), enabled: failingReads) {
            throw ProtocolError(.storageFailed, "the store could not be read: injected failure for \(name)")
        }
        return records[Bytes(name.utf8)]
    }

    mutating func list(_ name: String) throws(ProtocolError) -> ListState? {
        if Model.readFails(Bytes(name.utf8), enabled: failingReads) {
            throw ProtocolError(.storageFailed, "the store could not be read: injected failure for \(name)")
        }
        return lists[Bytes(name.utf8)]
    }

    mutating func listRows(_ name: String, descending: Bool, after: ListKey?) throws(ProtocolError) -> any ListCursor {
        (listRows[Bytes(name.utf8)] ?? SortedListRows()).cursor(descending: descending, after: after)
    }

    mutating func listKeys(_ name: String, holding entry: String) throws(ProtocolError) -> [ListKey] {
        listRows[Bytes(name.utf8)]?.keys(holding: entry) ?? []
    }

    mutating func commit(_ changes: [Change]) {
        for change in changes {
            switch change.target {
            case .record(_, let after, _): records[Bytes(change.name.utf8)] = after
            case .list(_, let after, let edit):
                lists[Bytes(change.name.utf8)] = after
                listRows[Bytes(change.name.utf8), default: SortedListRows()].apply(edit)
                if after == nil { listRows[Bytes(change.name.utf8)] = nil }
            }
        }
    }

    /// A list's entries in order.
    func entries(_ key: Bytes) -> [Bytes] { (listRows[key]?.entries ?? []).map { Bytes($0.utf8) } }

    /// Equal by bytes, member by member.
    func same(as other: FuzzState) -> Bool {
        guard records.count == other.records.count, lists.count == other.lists.count else { return false }
        for (key, record) in records {
            guard let twin = other.records[key], sameRecord(record, twin) else { return false }
        }
        for (key, list) in lists {
            guard let twin = other.lists[key], sameList(list, twin), entries(key) == other.entries(key) else { return false }
        }
        return true
    }
}

func sameRecord(_ a: RecordState, _ b: RecordState) -> Bool {
    a.name.utf8.elementsEqual(b.name.utf8) && a.version == b.version && a.seq == b.seq && a.created == b.created
        && a.updated == b.updated && a.data == b.data && a.dataBytes == b.dataBytes
}

func sameList(_ a: ListState, _ b: ListState) -> Bool {
    a.name.utf8.elementsEqual(b.name.utf8) && a.version == b.version && a.seq == b.seq && a.created == b.created
        && a.updated == b.updated && a.count == b.count && a.lastKey == b.lastKey
}

/// Parses what the hub produced (pushes): no limit but the input's size.
let roomyLimits = JSONLimits(maxDepth: 1 << 20, maxBytes: Int.max, maxStringBytes: Int.max,
                             maxArrayElements: Int.max, maxObjectMembers: Int.max)

struct Session {
    let config: Config
    let engine: Engine
    var state = FuzzState()
    var model: Model
    var subscriptions: Subscriptions
    var headSeq: Int64 = 0
    var now: Int64 = 1_764_460_800_000

    init(config: Config) {
        self.config = config
        engine = Engine(limits: config.engineLimits)
        state.failingReads = config.failingReads
        model = Model(limits: config.engineLimits, failingReads: config.failingReads)
        subscriptions = Subscriptions(lateStart: config.lateStart)
    }

    mutating func run(_ bytes: [UInt8]) {
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).prefix(64) {
            let text = Array(line)
            trace("> \(String(decoding: text, as: UTF8.self))")
            let message: JSONValue
            do {
                message = try JSONValue.parse(text, limits: config.messageLimits)
            } catch {
                check(error.offset >= 0 && error.offset <= text.count && !error.message.isEmpty,
                      "JSON error without a message or outside the input: \(error)")
                trace("  bad_json: \(error.message)")
                continue
            }
            if let request = decode(message) { handle(request) }
            now += config.clockStep
        }
    }

    mutating func handle(_ request: Request) {
        let slot = Subscriptions.slotIndex(for: request.id)
        switch request.operation {
        case .hello: subscriptions.reconnect(slot: slot)
        case .get, .report: break
        case .subscribe(let target, _): subscriptions.subscribe(target, slot: slot)
        case .unsubscribe(let target): subscriptions.unsubscribe(target, slot: slot)
        case .publish(let topic, _): subscriptions.checkTopic(topic)
        case .write(let writes, let atomic): write(writes, atomic: atomic)
        }
    }

    // MARK: Writes

    mutating func write(_ writes: [Write], atomic: Bool) {
        let firstSeq = headSeq + 1
        let before = state
        var expected = model
        var effects: [Effect] = []
        var refusal: (index: Int, codes: Set<String>, model: Model)?
        for (index, write) in writes.enumerated() {
            let snapshot = expected
            switch expected.apply(write, seq: firstSeq + Int64(index), now: now) {
            case .success(let effect): effects.append(effect)
            case .failure(let error): refusal = (index, error.codes, snapshot)
            }
            if refusal != nil { break }
        }

        let changes: [Change]
        do {
            changes = try engine.apply(writes, atomic: atomic, to: &state, firstSeq: firstSeq, now: now)
        } catch {
            trace("  refused: \(error.json)")
            check(state.same(as: before), "a refused write changed the state")
            guard let refusal else {
                check(false, "refused with \(error) but PROTOCOL.md accepts \(writes)")
                return
            }
            checkRefusal(error, writes: writes, atomic: atomic, index: refusal.index, codes: refusal.codes, model: refusal.model)
            return
        }
        if let refusal {
            check(false, "accepted, but ops[\(refusal.index)] \(writes[refusal.index]) must be refused with one of \(refusal.codes.sorted())")
        }
        check(state.same(as: before), "apply changed the state before commit")
        check(changes.count == writes.count, "\(writes.count) writes gave \(changes.count) changes")
        var pushes: [JSONObject] = []
        for (index, change) in changes.enumerated() {
            trace("  change: \(String(decoding: change.push, as: UTF8.self))")
            pushes.append(checkChange(change, write: writes[index], effect: effects[index], seq: firstSeq + Int64(index)))
        }
        state.commit(changes)
        model = expected
        headSeq += Int64(changes.count)
        checkState()
        for (change, push) in zip(changes, pushes) { subscriptions.deliver(change, push: push) }
    }

    func checkRefusal(_ error: ProtocolError, writes: [Write], atomic: Bool, index: Int, codes: Set<String>, model: Model) {
        let code = error.code.rawValue
        check(!error.message.isEmpty, "refusal \(code) without a message")
        check(codes.contains(code), "ops[\(index)] refused with \(code) (\(error.message)); expected one of \(codes.sorted())")
        if atomic {
            check(error.details["index"] == .number(JSONNumber(index)), "an atomic group's error names index \(String(describing: error.details["index"])), expected \(index)")
        } else {
            check(error.details["index"] == nil, "a single write's error carries an index")
        }
        let write = writes[index]
        let name = Bytes(write.name.utf8)
        let fieldPrefix = atomic ? "ops[\(index)]." : ""
        switch code {
        case "conflict":
            let key = write.isListWrite ? "list" : "name"
            check(error.details[key] == .string(write.name), "conflict without \(key): \(error.json)")
            if write.isListWrite {
                let current = model.lists[name]
                check(int64(error.details["version"]) == current?.version ?? 0, "conflict version \(String(describing: error.details["version"]))")
                let entries = current.map { JSONValue.array($0.entries.map { .string(String(decoding: $0, as: UTF8.self)) }) }
                check(error.details["entries"] == entries, "conflict entries \(String(describing: error.details["entries"])), expected \(String(describing: entries))")
            } else {
                let current = model.records[name]
                check(int64(error.details["version"]) == current?.version ?? 0, "conflict version \(String(describing: error.details["version"]))")
                check(error.details["data"] == current.map { .object($0.data) }, "conflict data \(String(describing: error.details["data"]))")
            }
        case "too_large":
            // A list's limit bounds what one setEntries carries; addEntry has none.
            let limits = write.isListWrite ? [config.engineLimits.maxListEntries]
                : [config.engineLimits.maxRecordBytes, config.engineLimits.maxRecordDepth]
            check(limits.map { JSONValue.number(JSONNumber($0)) }.contains(error.details["limit"] ?? .null),
                  "too_large names limit \(String(describing: error.details["limit"]))")
        case "bad_field":
            check(error.details["field"] == .string(fieldPrefix + "at"), "bad_field names \(String(describing: error.details["field"]))")
        case "bad_path", "not_a_number", "not_found", "storage_failed":
            if let field = error.details["field"] {
                check(field == .string(fieldPrefix + "path"), "\(code) names field \(field)")
            }
        default:
            break
        }
    }

    /// Checks one change against the write and the model; returns its push, parsed.
    func checkChange(_ change: Change, write: Write, effect: Effect, seq: Int64) -> JSONObject {
        check(change.seq == seq, "change seq \(change.seq), expected \(seq)")
        check(change.time == now, "change time \(change.time), expected \(now)")
        check(change.name.utf8.elementsEqual(write.name.utf8), "change names \(change.name.debugDescription), the write \(write.name.debugDescription)")
        check(change.isList == write.isListWrite, "a \(write.isListWrite ? "list" : "record") write changed a \(change.isList ? "list" : "record")")

        let version: Int64
        switch change.target {
        case .record(let before, let after, let scope):
            checkRecord(before, effect.beforeRecord, name: write.name, what: "before")
            checkRecord(after, effect.afterRecord, name: write.name, what: "after")
            version = (effect.beforeRecord?.version ?? 0) + 1
            if let after {
                check(after.dataBytes == JSONValue.object(after.data).serialized(), "dataBytes are not the data serialized")
                check(after.dataBytes.count <= config.engineLimits.maxRecordBytes, "record of \(after.dataBytes.count) bytes")
            }
            switch (write.action, scope) {
            case (.set, .whole), (.merge, .whole), (.delete, .whole): break
            case (.setPath(let p, _), .path(let q)), (.increment(let p, _), .path(let q)), (.deletePath(let p), .path(let q)):
                check(p == q, "scope \(q) for a write at \(p)")
            default: check(false, "scope \(scope) for \(write.action)")
            }
        case .list(let before, let after, _):
            checkList(before, effect.beforeList, name: write.name, what: "before")
            checkList(after, effect.afterList, name: write.name, what: "after")
            version = (effect.beforeList?.version ?? 0) + 1
        }

        // The reply's members.
        let key = change.isList ? "list" : "name"
        var replyKeys = [key, "seq", "version"]
        check(change.reply[key] == .string(write.name), "reply \(key) \(String(describing: change.reply[key]))")
        check(int64(change.reply["version"]) == version && int64(change.reply["seq"]) == seq, "reply \(change.reply)")
        if let value = effect.replyValue {
            replyKeys.append("value")
            check(change.reply["value"] == value, "increment replied \(String(describing: change.reply["value"])), expected \(value)")
        }
        check(Set(change.reply.keys) == Set(replyKeys), "reply members \(change.reply.keys), expected \(replyKeys.sorted())")

        return checkPush(change, effect: effect, key: key, version: version)
    }

    func checkRecord(_ actual: RecordState?, _ expected: ModelRecord?, name: String, what: String) {
        guard let actual, let expected else {
            check(actual == nil && expected == nil, "record \(what): \(actual == nil ? "none" : "one") but PROTOCOL.md says \(expected == nil ? "none" : "one")")
            return
        }
        check(actual.name.utf8.elementsEqual(name.utf8), "record \(what) named \(actual.name.debugDescription)")
        check(actual.version == expected.version && actual.seq == expected.seq,
              "record \(what) at version \(actual.version) seq \(actual.seq), expected \(expected.version) seq \(expected.seq)")
        check(actual.created == expected.created && actual.updated == expected.updated,
              "record \(what) created \(actual.created) updated \(actual.updated), expected \(expected.created) \(expected.updated)")
        check(actual.data == expected.data, "record \(what) data \(actual.data), expected \(expected.data)")
    }

    func checkList(_ actual: ListState?, _ expected: ModelList?, name: String, what: String) {
        guard let actual, let expected else {
            check(actual == nil && expected == nil, "list \(what): \(actual == nil ? "none" : "one") but PROTOCOL.md says \(expected == nil ? "none" : "one")")
            return
        }
        check(actual.name.utf8.elementsEqual(name.utf8), "list \(what) named \(actual.name.debugDescription)")
        check(actual.version == expected.version && actual.seq == expected.seq,
              "list \(what) at version \(actual.version) seq \(actual.seq), expected \(expected.version) seq \(expected.seq)")
        check(actual.created == expected.created && actual.updated == expected.updated, "list \(what) times")
        check(actual.count == expected.entries.count, "list \(what) count \(actual.count), expected \(expected.entries.count)")
    }

    /// The push is one JSON object with the members PROTOCOL.md ("Pushes")
    /// lists for its kind.
    func checkPush(_ change: Change, effect: Effect, key: String, version: Int64) -> JSONObject {
        guard case .object(let push)? = try? JSONValue.parse(change.push, limits: roomyLimits) else {
            check(false, "push is not a JSON object: \(String(decoding: change.push, as: UTF8.self))")
            return [:]
        }
        // Records are bounded in depth so their pushes parse with the message
        // limits clients use (the fuzz configurations keep records far below
        // the byte limit).
        do { _ = try JSONValue.parse(change.push) } catch {
            check(false, "push of seq \(change.seq) does not parse with JSONLimits() (\(error.message))")
        }
        let text = String(decoding: change.push, as: UTF8.self)
        check(push["op"] == "change", "push op \(String(describing: push["op"])): \(text)")
        check(int64(push["seq"]) == change.seq && int64(push["time"]) == now && int64(push["version"]) == version,
              "push seq/time/version: \(text)")
        check(push[key] == .string(change.name), "push \(key): \(text)")
        var keys = ["op", "seq", "time", key, "version", "kind"]
        func kind(_ name: String) { check(push["kind"] == .string(name), "push kind \(String(describing: push["kind"])), expected \(name): \(text)") }
        switch effect.push {
        case .set(let data):
            kind("set"); keys.append("data")
            check(push["data"] == .object(data), "push data differs from the record's: \(text)")
            if case .record(_, let after?, _) = change.target, case .object(let sent)? = push["data"] {
                check(JSONValue.object(sent).serialized() == after.dataBytes, "push data bytes differ from dataBytes")
            }
        case .setPath(let path, let value):
            kind("setPath"); keys += ["path", "value"]
            check(push["path"] == .string(path.description) && push["value"] == value, "push path/value: \(text)")
        case .deletePath(let path):
            kind("deletePath"); keys.append("path")
            check(push["path"] == .string(path.description), "push path: \(text)")
        case .delete, .deleteList:
            kind("delete")
        case .addEntry(let entry, let index):
            kind("addEntry"); keys += ["entry", "index"]
            check(push["entry"] == .string(String(decoding: entry, as: UTF8.self)) && int64(push["index"]) == Int64(index), "push entry/index: \(text)")
        case .removeEntry(let entry, let indexes):
            kind("removeEntry"); keys += ["entry", "indexes"]
            check(push["entry"] == .string(String(decoding: entry, as: UTF8.self)), "push entry: \(text)")
            check(push["indexes"] == .array(indexes.map { .number(JSONNumber($0)) }), "push indexes \(String(describing: push["indexes"])), expected \(indexes): \(text)")
        case .setEntries(let entries):
            kind("setEntries"); keys.append("entries")
            check(push["entries"] == .array(entries.map { .string(String(decoding: $0, as: UTF8.self)) }), "push entries: \(text)")
        }
        check(Set(push.keys) == Set(keys), "push members \(push.keys.sorted()), expected \(keys.sorted()): \(text)")
        return push
    }

    /// The engine's committed state is the model's.
    func checkState() {
        check(state.records.count == model.records.count, "\(state.records.count) records, expected \(model.records.count)")
        check(state.lists.count == model.lists.count, "\(state.lists.count) lists, expected \(model.lists.count)")
        for (key, record) in state.records {
            let name = String(decoding: key, as: UTF8.self)
            checkRecord(record, model.records[key], name: name, what: "stored")
        }
        for (key, list) in state.lists {
            let name = String(decoding: key, as: UTF8.self)
            checkList(list, model.lists[key], name: name, what: "stored")
            let entries = state.entries(key)
            check(entries == model.lists[key]?.entries, "list \(name) entries \(entries), expected \(String(describing: model.lists[key]?.entries))")
            check(list.lastKey == state.listRows[key]?.rows.last?.key, "list \(name) last key is not its last row's")
        }
    }
}
