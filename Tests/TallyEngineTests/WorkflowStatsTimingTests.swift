import Testing
@testable import TallyEngine
import TallyProtocol

/// The stage timing a workflow's stats record carries (issue 17, point 4):
/// per open stage the sum of the entry times of the records in it, and per
/// terminal stage the records finished in each hour of the day that ends
/// with the newest finish. Moved by deltas, they equal a recount; read back
/// after a restart, moved by the replacing deltas of another hub's changes,
/// and undone, they stay so.
@Suite("Workflow stats: waits per stage, finished per hour")
struct WorkflowStatsTimingTests {
    static let hour = WorkflowStats.hourMs

    /// Orders and intake jobs in every stage, some deleted, their writes a
    /// few minutes apart (about 26 hours in all, so old hours drop).
    static func busyHub(gapMs: Int64 = 20 * 60_000) throws -> WorkflowHarness {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 1_000_000]))], as: admin)
        for n in 0..<48 {
            hub.now += gapMs
            try hub.apply([Write(name: "orders/\(n)", action: .set(order(qty: 1)))], as: staff)
            try hub.apply([Write(name: "intake/\(n)", action: .set([:]))], as: staff)
            for step in 0..<(n % 5) {
                hub.now += gapMs / 3
                _ = hub.error([advance("orders/\(n % 3 == 0 ? n / 2 : n)")], as: admin)
                if step < 3 { _ = hub.error([advance("intake/\(n)")], as: admin) }
            }
            if n % 7 == 3 { _ = hub.error([advance("orders/\(n)", to: "cancelled")], as: staff) }
            if n % 6 == 4 { _ = hub.error([advance("intake/\(n)", to: "failed", reason: "blurred")], as: staff) }
            if n % 11 == 5 { try hub.apply([Write(name: "orders/\(n - 3)", action: .delete)], as: admin) }
            if n % 13 == 6 { try hub.apply([Write(name: "intake/\(n - 4)", action: .delete)], as: admin) }
        }
        return hub
    }

    static func recount(_ hub: WorkflowHarness, _ flow: Workflow) -> WorkflowStats {
        var fresh = WorkflowStats(workflow: flow)
        for record in hub.state.records.values where record.name.hasPrefix(flow.prefix) { fresh.count(record, in: flow) }
        return fresh
    }

    /// When the harness wrote last (it moves on by a second after each write).
    static func lastWrite(_ hub: WorkflowHarness) -> Int64 { hub.now - 1000 }

    static func updated(_ record: JSONObject) -> Int64 { record["updated"]?.numberValue?.int64Value ?? -1 }

    static func open(_ hub: WorkflowHarness, _ flow: Workflow) -> [WorkflowStats.OpenRecord] {
        hub.state.records.values
            .filter { $0.name.hasPrefix(flow.prefix) && flow.isOpen($0.data["stage"]?.stringValue ?? flow.stages.last!) }
            .map { WorkflowStats.OpenRecord($0, in: flow) }
    }

    static func stats(_ hub: WorkflowHarness, _ flow: Workflow) throws -> JSONObject {
        try #require(hub.data(flow.stats!))
    }

    @Test(arguments: [Workflow.orders, Workflow.intake])
    func theWaitsAndTheFinishedPerHourEqualARecount(_ flow: Workflow) throws {
        let hub = try Self.busyHub()
        let written = try Self.stats(hub, flow)
        let updated = try #require(written["updated"]?.numberValue?.int64Value)
        #expect(written == Self.recount(hub, flow).record(after: .init(), now: updated))

        // By hand, from the records: the waits…
        let records = hub.state.records.values.filter { $0.name.hasPrefix(flow.prefix) }
        let times = try #require(written["stageTime"]?.objectValue)
        for stage in flow.stages where flow.isOpen(stage) {
            let here = records.filter { $0.data["stage"]?.stringValue == stage }
            let entered = here.map { WorkflowStats.entered($0.data, created: $0.created) }
            let figures = try #require(times[stage]?.objectValue)
            #expect(figures["enteredSum"] == (here.isEmpty ? nil : .number(JSONNumber(entered.reduce(0, +)))), "\(stage)")
        }
        for stage in flow.stages where !flow.isOpen(stage) {
            #expect(times[stage]?["enteredSum"] == nil, "\(stage)")
        }
        // … and the finished per hour: the day up to the newest finish.
        let finished = try #require(written["finished"]?.objectValue)
        let finishes = records.flatMap { record in
            (record.data["history"]?.arrayValue ?? []).compactMap { entry -> Int64? in
                guard let to = entry["to"]?.stringValue, !flow.isOpen(to) else { return nil }
                return entry["time"]?.numberValue?.int64Value
            }
        }
        let last = WorkflowStats.hour(of: try #require(finishes.max()))
        #expect(finished["hour"] == .number(JSONNumber(last)))
        var any = false
        for stage in flow.stages where !flow.isOpen(stage) {
            var expected = [Int64](repeating: 0, count: 24)
            for record in records {
                guard case .array(let history)? = record.data["history"] else { continue }
                for case .object(let entry) in history where entry["to"]?.stringValue == stage {
                    let hour = WorkflowStats.hour(of: entry["time"]!.numberValue!.int64Value!)
                    let index = 23 - Int((last - hour) / Self.hour)
                    if index >= 0 { expected[index] += 1 }
                }
            }
            any = any || expected.contains { $0 > 0 }
            #expect(finished[stage] == .array(expected.map { .number(JSONNumber($0)) }), "\(stage)")
        }
        #expect(any, "the harness finished some \(flow.prefix) records in the last day")
        // The in-memory hours are bounded too: two days, not the whole run
        // (about 26 hours here).
        let kept = try #require(hub.stats[flow.prefix]).finished.keys
        #expect(kept.count <= 48 && kept.allSatisfy { $0 > last - 48 * Self.hour })
    }

    @Test func aWaitIsWhenTheRecordEnteredItsStageAndMovesWithIt() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 10]))], as: admin)
        let t0 = hub.now
        try hub.apply([Write(name: "orders/a", action: .set(order(qty: 1)))], as: staff)
        try hub.apply([Write(name: "orders/b", action: .set(order(qty: 1)))], as: staff)
        var stats = try Self.stats(hub, .orders)
        #expect(stats["stageTime"]?["received"]?["enteredSum"] == .number(JSONNumber(2 * t0 + 1000)))
        // A plain write changes no wait.
        try hub.apply([Write(name: "orders/a", action: .merge(["note": "fragile"]))], as: staff)
        #expect(try Self.stats(hub, .orders)["stageTime"]?["received"] == stats["stageTime"]?["received"])
        // a moves on: "received" now holds b, "in-progress" a since then.
        let moved = hub.now
        try hub.apply([advance("orders/a")], as: staff)
        stats = try Self.stats(hub, .orders)
        #expect(stats["stageTime"]?["received"]?["enteredSum"] == .number(JSONNumber(t0 + 1000)))
        #expect(stats["stageTime"]?["in-progress"]?["enteredSum"] == .number(JSONNumber(moved)))
        // Delivered: it waits nowhere and counts in its hour.
        for _ in 0..<2 { try hub.apply([advance("orders/a")], as: staff) }
        stats = try Self.stats(hub, .orders)
        #expect(stats["stageTime"]?["in-progress"]?["enteredSum"] == nil, "no record waits there")
        #expect(stats["finished"]?["delivered"]?.arrayValue?.last == 1)
        #expect(stats["finished"]?["hour"] == .number(JSONNumber(WorkflowStats.hour(of: Self.updated(stats)))))
        // Deleted, it leaves the hour it finished in (as a recount would).
        try hub.apply([Write(name: "orders/a", action: .delete)], as: admin)
        #expect(try Self.stats(hub, .orders)["finished"] == ["hour": .null, "delivered": .array([JSONValue](repeating: 0, count: 24)),
                                                             "cancelled": .array([JSONValue](repeating: 0, count: 24))])
        // So does a deleted open record leave its wait.
        try hub.apply([Write(name: "orders/b", action: .delete)], as: admin)
        stats = try Self.stats(hub, .orders)
        #expect(stats["stageTime"]?["received"]?["enteredSum"] == nil)
    }

    @Test func theDayEndsWithTheNewestFinishNotWithTheWrite() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
        hub.now = WorkflowStats.hour(of: hub.now) + 10 * 60_000
        let start = hub.now
        let first = WorkflowStats.hour(of: start)
        for n in 0..<3 {
            try hub.apply([Write(name: "orders/\(n)", action: .set(order(qty: 1)))], as: staff)
            try hub.apply([advance("orders/\(n)", to: "cancelled")], as: staff)
            hub.now += Self.hour
        }
        var finished = try #require(try Self.stats(hub, .orders)["finished"]?.objectValue)
        #expect(finished["hour"] == .number(JSONNumber(first + 2 * Self.hour)))
        #expect(finished["cancelled"]?.arrayValue?.suffix(3) == [1, 1, 1])
        #expect(finished["delivered"]?.arrayValue == [JSONValue](repeating: 0, count: 24))
        // A write hours later that finishes nothing leaves the day as it was.
        hub.now = start + 20 * Self.hour
        try hub.apply([Write(name: "orders/x", action: .set(order(qty: 1)))], as: staff)
        #expect(try Self.stats(hub, .orders)["finished"]?.objectValue == finished)
        // A finish 24 hours after the first: the first hour drops out.
        hub.now = start + 24 * Self.hour
        try hub.apply([advance("orders/x", to: "cancelled")], as: staff)
        var written = try Self.stats(hub, .orders)
        finished = try #require(written["finished"]?.objectValue)
        #expect(finished["hour"] == .number(JSONNumber(first + 24 * Self.hour)))
        #expect(finished["cancelled"]?.arrayValue?.prefix(2) == [1, 1])
        #expect(finished["cancelled"]?.arrayValue?.last == 1)
        #expect(finished["cancelled"]?.arrayValue?.reduce(0) { $0 + ($1.numberValue?.int64Value ?? 0) } == 3)
        #expect(written == Self.recount(hub, .orders).record(after: .init(), now: Self.lastWrite(hub)))
        // That finish deleted: the day ends with the one before, as a
        // recount says (the running figures kept the hours before it).
        try hub.apply([Write(name: "orders/x", action: .delete)], as: admin)
        written = try Self.stats(hub, .orders)
        #expect(written["finished"]?["hour"] == .number(JSONNumber(first + 2 * Self.hour)))
        #expect(written["finished"]?["cancelled"]?.arrayValue?.suffix(3) == [1, 1, 1])
        #expect(written == Self.recount(hub, .orders).record(after: .init(), now: Self.lastWrite(hub)))
        // A finish keeps the running hours to two days before it.
        hub.now = start + 60 * Self.hour
        try hub.apply([Write(name: "orders/y", action: .set(order(qty: 1)))], as: staff)
        try hub.apply([advance("orders/y", to: "cancelled")], as: staff)
        let kept = try #require(hub.stats["orders/"]).finished.keys
        #expect(kept.count == 1 && kept.first == WorkflowStats.hour(of: start + 60 * Self.hour))
    }

    @Test(arguments: [Workflow.orders, Workflow.intake])
    func readBackAfterARestartTheyGoOnAsARecountWould(_ flow: Workflow) throws {
        let hub = try Self.busyHub()
        let record = try Self.stats(hub, flow)
        let restored = try #require(WorkflowStats(restoring: record, open: Self.open(hub, flow), workflow: flow))
        #expect(restored.record(after: .init(), now: Self.updated(record)) == record)
        #expect(restored.enteredSum.filter { $0.value != 0 } == Self.recount(hub, flow).enteredSum.filter { $0.value != 0 })
        #expect(restored.oldest == Self.recount(hub, flow).oldest)
        hub.stats[flow.prefix] = restored
        // Open records move on, some to their end.
        for record in Self.open(hub, flow).sorted(by: { $0.name < $1.name }).prefix(12) {
            hub.now += 5 * 60_000
            _ = hub.error([advance(record.name)], as: admin)
        }
        try hub.apply([Write(name: "\(flow.prefix)new", action: .set(flow.prefix == "orders/" ? order(qty: 1) : [:]))], as: staff)
        let written = try Self.stats(hub, flow)
        #expect(written == Self.recount(hub, flow).record(after: .init(), now: Self.lastWrite(hub)))
    }

    @Test func aRecordWrittenBeforeTheTimingIsReadBackWithTheWaitsFromTheOpenRecords() throws {
        let hub = try Self.busyHub()
        var record = try Self.stats(hub, .orders)
        let expected = record
        record["finished"] = nil
        var times = try #require(record["stageTime"]?.objectValue)
        for (stage, figures) in times {
            var figures = try #require(figures.objectValue)
            figures["enteredSum"] = nil
            times[stage] = .object(figures)
        }
        record["stageTime"] = .object(times)
        let restored = try #require(WorkflowStats(restoring: record, open: Self.open(hub, .orders), workflow: .orders))
        var published = restored.record(after: .init(), now: Self.updated(expected))
        // The waits come back whole; the hours start empty.
        #expect(published["stageTime"] == expected["stageTime"])
        #expect(published["finished"]?["delivered"]?.arrayValue == [JSONValue](repeating: 0, count: 24))
        published["finished"] = nil
        var rest = expected
        rest["finished"] = nil
        #expect(published == rest)
    }

    @Test(arguments: ["hours not 24", "a negative hour count", "no hour", "an hour off the hour", "finished not an object",
                      "an open record in another stage"])
    func timingThatDoesNotFitIsNotReadBack(_ why: String) throws {
        let hub = try Self.busyHub()
        var record = try Self.stats(hub, .orders)
        var open = Self.open(hub, .orders)
        #expect(WorkflowStats(restoring: record, open: open, workflow: .orders) != nil)
        var finished = try #require(record["finished"]?.objectValue)
        switch why {
        case "hours not 24": finished["delivered"] = [1, 2]
        case "a negative hour count": finished["cancelled"] = .array(Array(repeating: 0, count: 23) + [-1])
        case "no hour": finished["hour"] = nil
        case "an hour off the hour": finished["hour"] = .number(JSONNumber(Self.lastWrite(hub)))
        case "finished not an object": record["finished"] = [1]
        default:
            let index = try #require(open.firstIndex { $0.stage == "received" })
            open[index].stage = "ready"
        }
        if why != "finished not an object" { record["finished"] = .object(finished) }
        #expect(WorkflowStats(restoring: record, open: open, workflow: .orders) == nil, "\(why)")
    }

    /// Another hub's changes, replayed through the replacing deltas, move
    /// the timing as the planner's own deltas do; each inverse undoes it.
    @Test(arguments: [Workflow.orders, Workflow.intake])
    func replacingDeltasMoveTheTimingAsThePlannersDo(_ flow: Workflow) throws {
        let hub = WorkflowHarness()
        let isOrders = flow.prefix == "orders/"
        var replayed = WorkflowStats(workflow: flow)
        var undo: [(JSONObject, WorkflowStats.Delta)] = []
        let at = WorkflowStats.hour(of: hub.now) + 30 * Self.hour
        func track(_ changes: [Change]) {
            for change in changes where change.name.hasPrefix(flow.prefix) {
                guard case .record(let before, let after, _) = change.target else { continue }
                let delta = WorkflowStats.Delta(replacing: before, with: after, in: flow)
                undo.append((replayed.record(after: .init(), now: at), replayed.applyUndoably(delta)))
            }
        }
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 1000]))], as: admin)
        for n in 0..<30 {
            hub.now += 40 * 60_000
            let name = "\(flow.prefix)\(n)"
            track(try hub.apply([Write(name: name, action: .set(isOrders ? order(qty: 1) : [:]))], as: staff))
            for _ in 0..<(n % 5) { if let changes = try? hub.apply([advance(name)], as: admin) { track(changes) } }
            if n % 4 == 1, let changes = try? hub.apply([advance(name, to: isOrders ? "cancelled" : "failed", reason: "no")], as: staff) {
                track(changes)
            }
            if n % 6 == 2 { track(try hub.apply([Write(name: "\(flow.prefix)\(n / 2)", action: .delete)], as: admin)) }
        }
        let planned = try #require(hub.stats[flow.prefix])
        #expect(replayed.record(after: .init(), now: at) == planned.record(after: .init(), now: at))
        #expect(replayed.enteredSum.filter { $0.value != 0 } == planned.enteredSum.filter { $0.value != 0 })
        #expect(replayed.finished == planned.finished)
        for (saved, inverse) in undo.reversed() {
            replayed.apply(inverse)
            #expect(replayed.record(after: .init(), now: at) == saved)
        }
        #expect(replayed.enteredSum.allSatisfy { $0.value == 0 } && replayed.finished.isEmpty)
    }
}
