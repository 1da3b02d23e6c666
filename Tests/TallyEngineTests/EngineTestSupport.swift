import Testing
@testable import TallyEngine
import TallyProtocol

/// A dictionary-backed `EngineState`, keyed by the names' UTF-8 bytes as the
/// stores are (so canonically equivalent names stay two names here).
struct DictState: EngineState {
    var records: [[UInt8]: RecordState] = [:]
    var lists: [[UInt8]: ListState] = [:]
    var listRows: [[UInt8]: SortedListRows] = [:]

    mutating func record(_ name: String) throws(ProtocolError) -> RecordState? { records[Array(name.utf8)] }
    mutating func list(_ name: String) throws(ProtocolError) -> ListState? { lists[Array(name.utf8)] }
    mutating func listRows(_ name: String, descending: Bool, after: ListKey?) throws(ProtocolError) -> any ListCursor {
        (listRows[Array(name.utf8)] ?? SortedListRows()).cursor(descending: descending, after: after)
    }
    mutating func listKeys(_ name: String, holding entry: String) throws(ProtocolError) -> [ListKey] {
        listRows[Array(name.utf8)]?.keys(holding: entry) ?? []
    }

    /// Makes accepted changes the current state, as the hub does after apply.
    mutating func commit(_ changes: [Change]) {
        for change in changes {
            switch change.target {
            case .record(_, let after, _): records[Array(change.name.utf8)] = after
            case .list(_, let after, let edit):
                lists[Array(change.name.utf8)] = after
                listRows[Array(change.name.utf8), default: SortedListRows()].apply(edit)
                #expect(after.map { $0.count == listRows[Array(change.name.utf8)]?.rows.count } ?? true,
                        "a list's count is its number of rows")
                #expect(after.map { $0.lastKey == listRows[Array(change.name.utf8)]?.rows.last?.key } ?? true,
                        "a list's last key is its last row's")
            }
        }
    }

    func record(named name: String) -> RecordState? { records[Array(name.utf8)] }
    func list(named name: String) -> ListState? { lists[Array(name.utf8)] }
    /// The entries of an existing list, in order.
    func entries(named name: String) -> [String]? {
        lists[Array(name.utf8)].map { _ in listRows[Array(name.utf8)]?.entries ?? [] }
    }
}

extension DictState: Equatable {}

/// An engine with its state, seq and clock: applies writes and commits them.
/// A class, so its methods can be called inside `#expect`.
final class EngineHarness {
    var engine: Engine
    var state = DictState()
    var headSeq: Int64 = 0
    var now: Int64 = 1_764_460_800_000

    init(limits: EngineLimits = EngineLimits()) { engine = Engine(limits: limits) }

    /// Applies and commits; each call advances the clock by one ms.
    @discardableResult
    func apply(_ writes: [Write], atomic: Bool) throws(ProtocolError) -> [Change] {
        let changes = try engine.apply(writes, atomic: atomic, to: &state, firstSeq: headSeq + 1, now: now)
        state.commit(changes)
        headSeq += Int64(changes.count)
        now += 1
        return changes
    }

    @discardableResult
    func write(_ write: Write) throws(ProtocolError) -> Change {
        let changes = try apply([write], atomic: false)
        #expect(changes.count == 1)
        return changes[0]
    }

    /// The error of a write (or group), checking that it changed nothing.
    func error(_ writes: [Write], atomic: Bool) -> ProtocolError? {
        let before = state
        do {
            let changes = try engine.apply(writes, atomic: atomic, to: &state, firstSeq: headSeq + 1, now: now)
            state.commit(changes)
            headSeq += Int64(changes.count)
            return nil
        } catch {
            #expect(state == before, "a refused write changed the state")
            return error
        }
    }

    func error(_ write: Write) -> ProtocolError? { error([write], atomic: false) }
}

func path(_ text: String) -> RecordPath {
    do { return try RecordPath(parsing: text) } catch { fatalError("bad test path \(text): \(error)") }
}

/// The push of `change`, parsed.
func pushObject(_ change: Change) throws -> JSONObject {
    guard case .object(let object) = try JSONValue.parse(change.push) else {
        throw ProtocolError(.badJSON, "push is not an object")
    }
    return object
}

/// A record change for registry tests: `before` → `after` of record `name`.
func recordChange(_ name: String, seq: Int64 = 1, before: JSONObject?, after: JSONObject?,
                  scope: Change.RecordScope = .whole) -> Change {
    func state(_ data: JSONObject?, version: Int64) -> RecordState? {
        data.map { RecordState(name: name, version: version, seq: seq, created: 0, updated: 0, data: $0,
                               dataBytes: JSONValue.object($0).serialized()) }
    }
    return Change(seq: seq, time: 0, name: name,
                  target: .record(before: state(before, version: 1), after: state(after, version: 2), scope: scope),
                  push: [], reply: [:])
}

func listChange(_ name: String, seq: Int64 = 1) -> Change {
    Change(seq: seq, time: 0, name: name,
           target: .list(before: nil, after: ListState(name: name, version: 1, seq: seq, created: 0, updated: 0, count: 0, lastKey: nil),
                         edit: .replace([])),
           push: [], reply: [:])
}

/// A registry behind a reference, so it can be asked inside `#expect`.
final class Registry {
    var registry = SubscriptionRegistry()

    func makeSubscriber() -> Int { registry.makeSubscriber() }
    func releaseSubscriber(_ slot: Int) { registry.releaseSubscriber(slot) }
    @discardableResult func add(_ target: SubscriptionTarget, slot: Int) -> Bool { registry.add(target, slot: slot) }
    @discardableResult func remove(_ target: SubscriptionTarget, slot: Int) -> Bool { registry.remove(target, slot: slot) }
    func subscriptions(of slot: Int) -> Set<SubscriptionTarget> { registry.subscriptions(of: slot) }
    func subscribers(ofTopic topic: String) -> [Int] { registry.subscribers(ofTopic: topic) }
    var count: Int { registry.count }

    /// The slots that must see `change`, in the order the registry gives them.
    func slots(_ change: Change) -> [Int] {
        var slots: [Int] = []
        registry.subscribers(of: change, into: &slots)
        return slots
    }
}
