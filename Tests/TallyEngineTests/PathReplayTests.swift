import Testing
import TallyTestSupport
@testable import TallyEngine
import TallyProtocol

/// PathReplay must pick, from pushes alone, exactly the changes a live path
/// subscriber received (PROTOCOL.md guarantee 5) whenever the log is complete.
@Suite("PathReplay")
struct PathReplayTests {
    /// A deterministic generator (SplitMix64), so failures reproduce.
    typealias Generator = SplitMix

    static let watched = ["stage", "items", "items[1]", "items[1].qty", "meta.tags"]

    /// Random writes to one record; every push fed to a replay filter per
    /// watched path must agree with the live rule.
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func agreesWithLiveDeliveryOnRandomHistories(seed: UInt64) throws {
        var random = Generator(state: seed)
        let hub = EngineHarness()
        var filters = Self.watched.map { PathReplay(path: path($0), logIsComplete: true) }
        let values: [JSONValue] = ["new", "done", 1, 2, [1, 2], ["qty": 3], .null]
        let wholeData: [JSONObject] = [
            ["stage": "new", "items": [["qty": 1], ["qty": 2]]],
            ["stage": "new", "items": [["qty": 1], ["qty": 5]]],
            ["stage": "done", "items": [], "meta": ["tags": ["a"]]],
            ["items": [["qty": 1], ["qty": 2], ["qty": 3]]],
        ]
        for step in 0..<200 {
            let exists = hub.state.record(named: "r") != nil
            let write: Write
            switch random.next() % 7 {
            case 0: write = Write(name: "r", action: .set(random.pick(wholeData)))
            case 1: write = Write(name: "r", action: .merge(["stage": random.pick(values)]))
            case 2: write = Write(name: "r", action: .setPath(path(random.pick(["stage", "items[0]", "items[1].qty", "meta.tags"])), random.pick(values)))
            case 3: write = Write(name: "r", action: .deletePath(path(random.pick(["items[0]", "stage", "meta", "items[1].qty"]))))
            case 4: write = Write(name: "r", action: .increment(path("count"), by: JSONNumber(1)))
            case 5: write = Write(name: "r", action: exists ? .delete : .set(random.pick(wholeData)))
            default: write = Write(name: "r", action: .setPath(path("items"), random.pick([[1, 2, 3], [["qty": 9]], []])))
            }
            guard let change = try? hub.apply([write], atomic: false).first else { continue }
            guard case .record(let before, let after, let scope) = change.target else { continue }
            let push = try pushObject(change)
            for index in Self.watched.indices {
                let live = SubscriptionRegistry.concerns(path: path(Self.watched[index]), before: before, after: after, scope: scope)
                let replayed = filters[index].concerns(push)
                // Where the pushes do not say what the value was, the replay
                // may deliver more (never less) than the live rule.
                #expect(replayed || !live, "step \(step), path \(Self.watched[index]): replay dropped a live push \(push)")
            }
        }
    }

    @Test func aWholeWriteThatLeavesThePathAloneIsSkipped() throws {
        var filter = PathReplay(path: path("stage"), logIsComplete: true)
        var delivered: Bool
        delivered = filter.concerns(["kind": "set", "data": ["stage": "new", "n": 1]])
        #expect(delivered)
        delivered = filter.concerns(["kind": "set", "data": ["stage": "new", "n": 2]])
        #expect(!delivered)
        delivered = filter.concerns(["kind": "setPath", "path": "stage", "value": "done"])
        #expect(delivered)
        delivered = filter.concerns(["kind": "set", "data": ["stage": "done", "n": 3]])
        #expect(!delivered)
        delivered = filter.concerns(["kind": "setPath", "path": "n", "value": 4])
        #expect(!delivered)
        delivered = filter.concerns(["kind": "delete"])
        #expect(delivered)
    }

    @Test func withoutTheRecordsStartTheFirstWholeWriteIsDelivered() {
        var filter = PathReplay(path: path("stage"), logIsComplete: false)
        var delivered: Bool
        delivered = filter.concerns(["kind": "set", "data": ["stage": "new"]])
        #expect(delivered)
        delivered = filter.concerns(["kind": "set", "data": ["stage": "new", "n": 1]])
        #expect(!delivered)
    }

    @Test func removingAnEarlierArrayElementMakesTheValueUnknown() {
        var filter = PathReplay(path: path("items[1]"), logIsComplete: true)
        var delivered: Bool
        delivered = filter.concerns(["kind": "set", "data": ["items": [1, 2, 3]]])
        #expect(delivered)
        delivered = filter.concerns(["kind": "deletePath", "path": "items[0]"])
        #expect(!delivered)
        // items[1] is now 3, not 2: the next whole write must be delivered.
        delivered = filter.concerns(["kind": "set", "data": ["items": [2, 3]]])
        #expect(delivered)
    }
}
