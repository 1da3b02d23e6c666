import Testing
@testable import TallyEngine
import TallyProtocol

/// What a hub on a shared store rebuilds from another hub's logged change
/// (`Change.replaying`) and does to its workflow stats
/// (`WorkflowStats.Delta(replacing:with:in:)`, the inverse `apply` returns):
/// the same as the hub that made the change.
@Suite("Another hub's changes, replayed")
struct ChangeReplayTests {
    /// Every write kind, applied by the engine, then rebuilt from its push
    /// and the state before: the same change.
    @Test func aReplayedChangeIsTheChangeTheEngineMade() throws {
        let engine = Engine()
        var state = DictState()
        let writes: [Write] = [
            Write(name: "r", action: .set(["a": 1, "b": ["c": [1, 2]]])),
            Write(name: "r", action: .setPath(try RecordPath(parsing: "b.c[2]"), 3)),
            Write(name: "r", action: .increment(try RecordPath(parsing: "a"), by: 5)),
            Write(name: "r", action: .merge(["a": .null, "d": "x"])),
            Write(name: "r", action: .deletePath(try RecordPath(parsing: "b.c[0]"))),
            Write(name: "r", action: .delete),
            Write(name: "r", action: .setPath(try RecordPath(parsing: "fresh"), true)),
        ]
        var seq: Int64 = 0
        var now: Int64 = 1_000
        for write in writes {
            let before = state.record(named: "r")
            let made = try #require(try engine.apply([write], atomic: false, to: &state, firstSeq: seq + 1, now: now).first)
            state.commit([made])
            seq += 1
            now += 10
            guard case .object(let push) = try JSONValue.parse(made.push) else {
                Issue.record("push is not an object")
                continue
            }
            let replayed = try Change.replaying(push, message: made.push, prior: before)
            #expect(replayed.seq == made.seq && replayed.time == made.time && replayed.name == made.name)
            #expect(replayed.push == made.push)
            guard case .record(let b1, let a1, let s1) = made.target,
                  case .record(let b2, let a2, let s2) = replayed.target else {
                Issue.record("not record changes")
                continue
            }
            #expect(b1 == b2)
            #expect(a1 == a2, "\(write.action)")
            switch (s1, s2) {
            case (.whole, .whole): break
            case (.path(let p1), .path(let p2)): #expect(p1 == p2)
            default: Issue.record("scopes differ for \(write.action)")
            }
        }
    }

    @Test func aMessageThatIsNoRecordChangeIsRefused() {
        #expect(throws: ProtocolError.self) { try Change.replaying(["op": "event"], message: [], prior: nil) }
        #expect(throws: ProtocolError.self) {
            try Change.replaying(["op": "change", "name": "r", "seq": 1, "time": 1, "version": 1, "kind": "setPath"],
                                 message: [], prior: nil)
        }
    }

    /// Stats moved by the replacing deltas of every order change equal the
    /// planner's own, and each inverse takes the stats back exactly.
    @Test func replacingDeltasMatchThePlannersAndInversesUndoThem() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
        var replayed = WorkflowStats(workflow: .orders)
        var undo: [(WorkflowStats, WorkflowStats.Delta)] = []
        func track(_ changes: [Change]) {
            for change in changes where change.name.hasPrefix("orders/") {
                guard case .record(let before, let after, _) = change.target else { continue }
                let delta = WorkflowStats.Delta(replacing: before, with: after, in: .orders)
                let saved = replayed
                undo.append((saved, replayed.applyUndoably(delta)))
            }
        }
        for n in 0..<12 {
            track(try hub.apply([Write(name: "orders/\(n)", action: .set(order(qty: 1)))], as: staff))
            for _ in 0..<(n % 4) { track(try hub.apply([advance("orders/\(n)")], as: admin)) }
            if n % 5 == 2, n % 4 < 3 { track(try hub.apply([advance("orders/\(n)", to: "cancelled")], as: staff)) }
            if n % 6 == 1 { track(try hub.apply([Write(name: "orders/\(n)", action: .delete)], as: admin)) }
        }
        let planned = try #require(hub.stats["orders/"])
        #expect(replayed.counts == planned.counts)
        #expect(replayed.stageTime == planned.stageTime)
        #expect(replayed.oldest == planned.oldest)
        // Undone one by one from the last: back through every state.
        for (saved, inverse) in undo.reversed() {
            replayed.apply(inverse)
            #expect(replayed.counts.filter { $0.value != 0 } == saved.counts.filter { $0.value != 0 })
            #expect(replayed.stageTime.filter { $0.value != WorkflowStats.StageTime() }
                    == saved.stageTime.filter { $0.value != WorkflowStats.StageTime() })
            #expect(replayed.oldest == saved.oldest)
        }
    }
}
