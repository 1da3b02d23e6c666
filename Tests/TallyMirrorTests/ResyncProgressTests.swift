import Testing
import TallyClient
import TallyConcurrency
@testable import TallyMirror
import TallyNet
import TallyProtocol
import TallyTestSupport

@Suite struct ResyncTrackerTests {
    @Test func aStartAndAnEndAreStoredAtOnceAndStepsBetweenAtMostEveryInterval() {
        var tracker = ResyncTracker()
        #expect(tracker.due(now: 0) == nil, "nothing changed, nothing to store")
        let connecting = ResyncState(phase: .connecting, done: 1)
        tracker.set(connecting, now: 1000)
        #expect(tracker.due(now: 1000) == .some(connecting))
        tracker.set(ResyncState(phase: .applying, target: "prefix:items/", done: 2000, total: 10_000), now: 1010)
        #expect(tracker.due(now: 1010) == nil, "a step 10 ms after the last write waits")
        let later = ResyncState(phase: .applying, target: "prefix:items/", done: 4000, total: 10_000)
        tracker.set(later, now: 1100)
        #expect(tracker.due(now: 1200) == nil)
        #expect(tracker.due(now: 1250) == .some(later), "the latest step once the interval has passed")
        #expect(tracker.due(now: 1600) == nil, "stored already")
        tracker.set(ResyncState(phase: .replaying, done: 0, total: 5), now: 1300)
        tracker.set(nil, now: 1301)
        #expect(tracker.due(now: 1301) == .some(nil), "the end is stored at once")
        #expect(tracker.due(now: 2000) == nil)
    }

    @Test func aWaitCountsItsMillisecondsFromWhenItBegan() {
        var tracker = ResyncTracker()
        tracker.set(ResyncState(phase: .waiting, total: 3000), now: 10_000)
        tracker.refresh(now: 11_200)
        #expect(tracker.current == ResyncState(phase: .waiting, done: 1200, total: 3000))
        tracker.refresh(now: 20_000)
        #expect(tracker.current?.done == 3000, "never past the delay")
        // Another phase is not a clock.
        tracker.set(ResyncState(phase: .receiving, done: 10_000), now: 20_001)
        tracker.refresh(now: 30_000)
        #expect(tracker.current?.done == 10_000)
    }

    @Test func theStateReadsAndPrintsAsStatusShowsIt() {
        let applying = ResyncState(phase: .applying, target: "prefix:items/", done: 45_000, total: 100_000)
        #expect(applying.summary == "applying 45% 45000/100000 (prefix:items/)")
        #expect(ResyncState(json: applying.json) == applying)
        #expect(applying.json["total"] == 100_000 && applying.json["phase"] == "applying")
        let receiving = ResyncState(phase: .receiving, target: "prefix:items/", done: 23_000)
        #expect(receiving.summary == "receiving 23000 records (prefix:items/)")
        #expect(receiving.json["total"] == .null && ResyncState(json: receiving.json) == receiving)
        #expect(ResyncState(phase: .replaying, done: 3, total: 4).summary == "replaying 75% 3/4 outbox entries")
        #expect(ResyncState(phase: .waiting, done: 1200, total: 3000).summary == "waiting 40% 1200/3000 ms")
        #expect(ResyncState(phase: .connecting, done: 3).summary == "connecting (attempt 3)")
        #expect(ResyncState(json: ["phase": "dozing", "done": 1]) == nil)
        // Small steps are not worth a line on stderr.
        #expect(!ResyncState(phase: .applying, done: 3, total: 3).worthShowing)
        #expect(applying.worthShowing && receiving.worthShowing)
        #expect(!ResyncState(phase: .receiving).worthShowing && !ResyncState(phase: .connecting).worthShowing)
    }
}

// The phases a real resync goes through, as `mirror run` reports them.
@Suite(.serialized) struct ResyncProgressTests {
    @Test func aResyncReportsEachPhaseAndEndsIdle() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        // Over the hub's 10,000 records per snapshot reply: the rest comes in pages.
        let count = 10_500
        for start in stride(from: 0, to: count, by: 1000) {
            _ = try await checker.write(atomic: (start..<min(count, start + 1000)).map {
                .set("items/i\($0)", data: ["n": .int(Int64($0))])
            })
        }
        let mirror = try TestMirror(patterns: ["items/", "notes/"])
        let writes = 120
        for i in 0..<writes { _ = try mirror.store.write(.set(name: "notes/w\(i)", path: nil, value: ["i": .int(Int64(i))])) }

        let seen = LockedValueBox<[ResyncState?]>([])
        try mirror.start(hub.url) { state in seen.withLock { $0.append(state) } }
        try await mirror.waitConverged()
        try await waitFor("the resync to end") { seen.withLock { $0.last } == .some(nil) }
        var states = seen.withLock { $0 }
        #expect(states.first == .some(ResyncState(phase: .connecting, done: 1)))
        let pages = states.compactMap { $0 }.filter { $0.phase == .receiving && $0.target == "prefix:items/" }.map(\.done)
        #expect(pages.first == 10_000 && pages.last == count && pages == pages.sorted(), "pages: \(pages)")
        let applied = states.compactMap { $0 }.filter { $0.phase == .applying && $0.target == "prefix:items/" }
        #expect(applied.last?.done == count && applied.allSatisfy { $0.total == count })
        let replay = states.compactMap { $0 }.filter { $0.phase == .replaying }
        #expect(replay.first == ResyncState(phase: .replaying, done: 0, total: writes))
        #expect(replay.map(\.done) == Array(0..<writes), "one step per confirmed entry")
        // The store says what the run last told: no resync.
        try await waitFor("the stored state to follow") { try mirror.store.meta("resync") == nil }
        mirror.stop()

        // A restarted hub asks resuming clients to wait (retryAfterMs), and
        // `mirror run` honours it: the wait is the first phase after hello.
        hub.stop()
        try hub.start()
        seen.withLock { $0 = [] }
        _ = try mirror.store.write(.set(name: "notes/after", path: nil, value: ["after": true]))
        try mirror.start(hub.url, honourRetryAfter: true) { state in seen.withLock { $0.append(state) } }
        try await mirror.waitConverged()
        try await waitFor("the resync to end") { seen.withLock { $0.last } == .some(nil) }
        states = seen.withLock { $0 }
        let asked = try #require(mirror.sync?.client.hello?["retryAfterMs"]?.int64)
        let phases = states.compactMap { $0?.phase }
        if asked > 0 {
            let wait = try #require(states.compactMap { $0 }.first { $0.phase == .waiting })
            #expect(wait.total == Int(asked))
            #expect(phases.firstIndex(of: .waiting)! < phases.firstIndex(of: .receiving)!)
        }
        #expect(phases.last == .replaying)
        mirror.stop()
    }
}
