import Testing
@testable import TallyEngine
import TallyProtocol

/// Found by FuzzEngine (Fuzz/regressions/FuzzEngine/): a record created by a
/// path write reaches every path subscriber, and records stay shallow enough
/// for their pushes to parse with the message limits.
@Suite("Engine bounds and creation")
struct EngineBoundsTests {
    @Test func creationByAPathWriteConcernsEveryPathSubscriber() throws {
        for action in [Write.Action.setPath(path("a"), 1), .increment(path("n"), by: JSONNumber(1))] {
            let hub = EngineHarness()
            let change = try hub.write(Write(name: "r", action: action))
            guard case .record(let before, let after, let scope) = change.target else { Issue.record("not a record"); return }
            #expect(SubscriptionRegistry.concerns(path: path("b"), before: before, after: after, scope: scope))
            var replay = PathReplay(path: path("b"), logIsComplete: true)
            let delivered = replay.concerns(try pushObject(change))
            #expect(delivered)
            // A later path write elsewhere is not a creation.
            let later = try hub.write(Write(name: "r", action: .setPath(path("a"), 2)))
            let again = replay.concerns(try pushObject(later))
            #expect(!again)
        }
    }

    @Test func recordsDeeperThanTheLimitAreRefused() throws {
        let hub = EngineHarness(limits: EngineLimits(maxRecordDepth: 4))
        try hub.write(Write(name: "r", action: .set(["a": ["b": ["c": 1]]])))          // depth 3
        let error = hub.error(Write(name: "r", action: .setPath(path("a.b.c"), ["d": ["e": 1]])))
        #expect(error?.code == .tooLarge)
        #expect(error?.details["limit"] == 4)
        #expect(hub.state.record(named: "r")?.version == 1)
        var nested: JSONValue = 1
        for _ in 0..<4 { nested = ["x": nested] }
        #expect(hub.error(Write(name: "s", action: .set(["top": nested])))?.code == .tooLarge)
    }

    @Test func theDefaultDepthLeavesRoomForEnvelopes() {
        // A reply nests data three levels below its root; messages parse with depth 64.
        #expect(EngineLimits().maxRecordDepth + 3 <= JSONLimits().maxDepth)
    }
}
