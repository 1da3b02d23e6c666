// The subscription side: a model of who is subscribed to what, the delivery
// rule of PROTOCOL.md ("subscribe / unsubscribe", "Delivery guarantees"), and
// PathReplay filters that must never drop a push a live subscriber got.
import FuzzSupport
import TallyEngine
import TallyProtocol

/// A subscription target by bytes (names compare by bytes, PROTOCOL.md).
enum ModelTarget: Hashable {
    case record(Bytes)
    case path(Bytes, RecordPath)
    case list(Bytes)
    case prefix(Bytes)
    case topic(Bytes)
    /// A live query: its subscribers get query messages, never the change
    /// pushes `subscribers(of:)` finds.
    case query(Query)

    init(_ target: SubscriptionTarget) {
        switch target {
        case .record(let name): self = .record(Bytes(name.utf8))
        case .path(let name, let path): self = .path(Bytes(name.utf8), path)
        case .list(let name): self = .list(Bytes(name.utf8))
        case .prefix(let prefix): self = .prefix(Bytes(prefix.utf8))
        case .topic(let topic): self = .topic(Bytes(topic.utf8))
        case .query(let query): self = .query(query)
        }
    }
}

/// Who must see a record change at all, by PROTOCOL.md: a path subscriber
/// sees changes at overlapping paths, whole-record writes that changed the
/// value under its path, and the record's creation and deletion.
func specConcerns(path: RecordPath, before: RecordState?, after: RecordState?, scope: Change.RecordScope) -> Bool {
    if before == nil || after == nil { return true }
    switch scope {
    case .path(let changed): return modelOverlaps(changed, path)
    case .whole: return modelGet(before?.data, path) != modelGet(after?.data, path)
    }
}

/// One record change as a resume replays it: the push, and what the live
/// rule said.
struct LoggedChange {
    var push: JSONObject
    var before: RecordState?
    var after: RecordState?
    var scope: Change.RecordScope
    var seq: Int64
}

/// A watched (record, path): PathReplay filters over the record's log, and
/// the values seen under the path (to probe the filters with).
struct Watch {
    let name: Bytes
    let path: RecordPath
    /// Fed the record's whole log, as a resume with floor 0 does.
    var complete: PathReplay
    /// Started partway through the log (floor > 0): `logIsComplete: false`.
    var late: PathReplay
    var candidates: [JSONValue?] = [nil]

    mutating func remember(_ value: JSONValue?) {
        guard candidates.count < 12, !candidates.contains(where: { $0 == value }) else { return }
        candidates.append(value)
    }
}

struct Subscriptions {
    static let slotCount = 4
    static let maxWatches = 16

    var registry = SubscriptionRegistry()
    var slots: [Int] = []
    var model: [Set<ModelTarget>] = Array(repeating: [], count: slotCount)
    /// Every target ever subscribed, for `SubscriptionRegistry.matches`.
    var targets: [ModelTarget: SubscriptionTarget] = [:]
    var logs: [Bytes: [LoggedChange]] = [:]
    var watches: [Watch] = []
    /// Where late filters start in the log: 0 at the start, 1 after the first
    /// change, 2 in the middle, 3 at the end.
    let lateStart: Int

    init(lateStart: Int) {
        self.lateStart = lateStart
        for _ in 0..<Self.slotCount { slots.append(registry.makeSubscriber()) }
        check(Set(slots).count == Self.slotCount, "makeSubscriber gave a slot twice: \(slots)")
        // A few subscriptions on the names the seeds and the dictionary use.
        func path(_ text: String) -> RecordPath {
            do { return try RecordPath(parsing: text) } catch { fatalError("bad path \(text)") }
        }
        let initial: [(Int, SubscriptionTarget)] = [
            (0, .record("orders/42")), (0, .list("orders")), (0, .topic("scanner")),
            (1, .path("orders/42", path("stage"))), (1, .path("orders/42", path("items[1].qty"))), (1, .prefix("orders/")),
            (2, .path("orders/42", path("items"))), (2, .path("orders/42", path("items[0]"))),
            (2, .path("stats/scans", path("count"))), (2, .list("tags")),
            (3, .prefix("")), (3, .record("stats/scans")), (3, .path("orders/42", path("meta.tags"))),
        ]
        for (slot, target) in initial { subscribe(target, slot: slot) }
    }

    /// The slot a message acts for: its integer id mod 4, a string id's length mod 4, else 0.
    static func slotIndex(for id: JSONValue?) -> Int {
        switch id {
        case .number(let number)?: return Int((number.int64Value ?? 0).magnitude % UInt64(slotCount))
        case .string(let text)?: return text.utf8.count % slotCount
        default: return 0
        }
    }

    mutating func subscribe(_ target: SubscriptionTarget, slot index: Int) {
        let added = registry.add(target, slot: slots[index])
        let expected = model[index].insert(ModelTarget(target)).inserted
        targets[ModelTarget(target)] = target
        check(added == expected, "add(\(target)) returned \(added); the slot \(expected ? "did not have" : "had") it")
        checkSlot(index)
        if case .path(let name, let path) = target { watch(Bytes(name.utf8), path) }
    }

    mutating func unsubscribe(_ target: SubscriptionTarget, slot index: Int) {
        let removed = registry.remove(target, slot: slots[index])
        let expected = model[index].remove(ModelTarget(target)) != nil
        check(removed == expected, "remove(\(target)) returned \(removed); the slot \(expected ? "had" : "did not have") it")
        checkSlot(index)
    }

    /// A reconnect: the slot is released and made again, with nothing subscribed.
    mutating func reconnect(slot index: Int) {
        registry.releaseSubscriber(slots[index])
        let slot = registry.makeSubscriber()
        check(slot == slots[index], "the released slot \(slots[index]) was not reused (got \(slot))")
        slots[index] = slot
        model[index] = []
        checkSlot(index)
    }

    func checkSlot(_ index: Int) {
        let actual = Set(registry.subscriptions(of: slots[index]).map(ModelTarget.init))
        check(actual == model[index], "slot \(index) has subscriptions \(actual), expected \(model[index])")
        let total = model.reduce(0) { $0 + $1.count }
        check(registry.count == total, "registry count \(registry.count), expected \(total)")
    }

    /// Subscribers of an event topic: each subscribed slot once.
    func checkTopic(_ topic: String) {
        let found = registry.subscribers(ofTopic: topic)
        check(Set(found).count == found.count, "topic \(topic) lists a slot twice: \(found)")
        let key = ModelTarget.topic(Bytes(topic.utf8))
        let expected = Set(model.indices.filter { model[$0].contains(key) }.map { slots[$0] })
        check(Set(found) == expected, "topic \(topic) reaches slots \(found), expected \(expected)")
    }

    /// Checks who the registry says must see `change`, and feeds record
    /// changes to the PathReplay filters.
    mutating func deliver(_ change: Change, push: JSONObject) {
        var found: [Int] = []
        registry.subscribers(of: change, into: &found)
        check(Set(found).count == found.count, "subscribers(of:) lists a slot twice: \(found) for \(change.name)")
        let name = Bytes(change.name.utf8)
        var expected: Set<Int> = []
        for index in model.indices {
            let concerned = model[index].contains { target in
                switch (target, change.target) {
                case (.list(let list), .list): return list == name
                case (.record(let record), .record): return record == name
                case (.prefix(let prefix), .record): return name.starts(with: prefix)
                case (.path(let record, let path), .record(let before, let after, let scope)):
                    return record == name && specConcerns(path: path, before: before, after: after, scope: scope)
                default: return false
                }
            }
            if concerned { expected.insert(slots[index]) }
        }
        check(Set(found) == expected, "change seq \(change.seq) to \(change.name.debugDescription) reaches slots \(found.sorted()), expected \(expected.sorted())")

        guard case .record(let before, let after, let scope) = change.target else { return }
        // What a resume replays from the log for each kind of target.
        for (key, target) in targets {
            let expected: Bool
            switch key {
            case .record(let record), .path(let record, _): expected = record == name
            case .prefix(let prefix): expected = name.starts(with: prefix)
            case .list, .topic, .query: expected = false
            }
            check(SubscriptionRegistry.matches(target, recordNamed: change.name) == expected,
                  "matches(\(target), recordNamed: \(change.name.debugDescription)) is not \(expected)")
        }
        let logged = LoggedChange(push: push, before: before, after: after, scope: scope, seq: change.seq)
        logs[name, default: []].append(logged)
        for index in watches.indices where watches[index].name == name {
            Self.feed(&watches[index], logged)
            Self.probe(watches[index], current: after)
        }
    }

    /// Starts filters for a newly subscribed path: one over the whole log, one
    /// from partway through it.
    mutating func watch(_ name: Bytes, _ path: RecordPath) {
        guard watches.count < Self.maxWatches, !watches.contains(where: { $0.name == name && $0.path == path }) else { return }
        var watch = Watch(name: name, path: path, complete: PathReplay(path: path, logIsComplete: true),
                          late: PathReplay(path: path, logIsComplete: false))
        let log = logs[name] ?? []
        let start = [0, min(1, log.count), log.count / 2, log.count][lateStart & 3]
        for (position, logged) in log.enumerated() {
            Self.feed(&watch, logged, late: position >= start)
        }
        Self.probe(watch, current: log.last?.after)
        watches.append(watch)
    }

    /// One push through a watch's filters: neither may drop a push the live
    /// rule delivered.
    static func feed(_ watch: inout Watch, _ logged: LoggedChange, late: Bool = true) {
        let live = SubscriptionRegistry.concerns(path: watch.path, before: logged.before, after: logged.after, scope: logged.scope)
        let spec = specConcerns(path: watch.path, before: logged.before, after: logged.after, scope: logged.scope)
        check(live == spec, "concerns(path: \(watch.path)) is \(live) for seq \(logged.seq), PROTOCOL.md says \(spec): \(logged.push)")
        let complete = watch.complete.concerns(logged.push)
        check(complete || !live, "PathReplay(\(watch.path), complete log) dropped seq \(logged.seq) that a live subscriber got: \(logged.push)")
        if late {
            let partial = watch.late.concerns(logged.push)
            check(partial || !live, "PathReplay(\(watch.path), partial log) dropped seq \(logged.seq) that a live subscriber got: \(logged.push)")
        }
        watch.remember(modelGet(logged.before?.data, watch.path))
        watch.remember(modelGet(logged.after?.data, watch.path))
    }

    /// What a filter believes the value under its path is must be right: a
    /// whole-record write that puts any value seen so far under the path is
    /// delivered whenever a live subscriber would get it.
    static func probe(_ watch: Watch, current: RecordState?) {
        let now = modelGet(current?.data, watch.path)
        for candidate in watch.candidates {
            // Live rule for a set from `current` to data with `candidate` there.
            let live = current == nil || now != candidate
            guard live else { continue }
            let push: JSONObject = ["op": "change", "kind": "set", "data": .object(modelBuild(watch.path, candidate))]
            for filter in [watch.complete, watch.late] {
                var probe = filter
                check(probe.concerns(push), "PathReplay(\(watch.path)) would drop a set that changes the value there from \(now.map(\.description) ?? "nothing") to \(candidate.map(\.description) ?? "nothing")")
            }
        }
    }
}
