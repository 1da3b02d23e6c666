import Testing
@testable import TallyStore

/// Pruning by count and by age, one body for both backends.
@Suite struct StoreRetentionTests {
    @Test(arguments: Backend.allCases)
    func pruneByCount(backend: Backend) throws {
        let h = try StoreHarness(backend, retention: StoreRetention(maxChanges: 5))
        for seq in Int64(1)...20 {
            h.store.submit(h.unit([.putRecord(record("r\(seq)", seq: seq))], changes: [change(seq, .record, "r\(seq)")]))
        }
        try h.sync()
        let state = try h.reader.state()
        #expect(state.headSeq == 20)
        #expect(state.floorSeq == 15)
        #expect(state.changeCount == 5)
        #expect(try h.reader.changes(after: 0, limit: 100).map(\.seq) == [16, 17, 18, 19, 20])
        #expect(state.recordCount == 20, "records are never pruned")
    }

    /// The slack: a large log is pruned in batches, not one row per commit.
    @Test func countSlackBatchesDeletes() {
        let policy = RetentionPolicy(retention: StoreRetention(maxChanges: 6_400), clock: .system)
        #expect(policy.slack == 100)
        #expect(policy.excess(changeCount: 6_499) == 0)
        #expect(policy.excess(changeCount: 6_500) == 100)
        let big = RetentionPolicy(retention: StoreRetention(maxChanges: 10_000_000), clock: .system)
        #expect(big.slack == RetentionPolicy.stepLimit)
        #expect(big.excess(changeCount: 10_000_000 + 25_000) == RetentionPolicy.stepLimit)
        #expect(big.excessNeedsMoreSteps(changeCount: 10_000_000 + 25_000))
        let none = RetentionPolicy(retention: StoreRetention(maxChanges: 0), clock: .system)
        #expect(none.excess(changeCount: 1) == 1)
    }

    @Test(arguments: Backend.allCases)
    func pruneByAge(backend: Backend) throws {
        let clock = ManualClock(1_700_000_000_000)
        let t = clock.now
        let second: Int64 = 1_000
        let h = try StoreHarness(backend, retention: StoreRetention(maxAge: 60, idempotencyMaxAge: 30),
                                 clock: clock.storeClock)
        // Nothing is old yet: age checks at t find nothing (the first runs when the writer starts).
        try h.commit(changes: [change(1, .record, "a", time: t - 50 * second), change(2, .record, "b", time: t - 40 * second)],
                     idempotency: StoredIdempotency(key: "old", seq: 2, time: t - 25 * second, response: []))
        // A young change before an older one: pruning stops at the first young seq.
        try h.commit(changes: [change(3, .record, "c", time: t), change(4, .record, "d", time: t - 55 * second)],
                     idempotency: StoredIdempotency(key: "new", seq: 4, time: t, response: []))
        try h.sync()
        #expect(try h.reader.state().changeCount == 4)

        clock.advance(seconds: 15)  // cutoffs: changes t-45 s, idempotency t-15 s
        try h.sync()
        let state = try h.reader.state()
        #expect(state.floorSeq == 1)
        #expect(state.headSeq == 4)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [2, 3, 4])
        #expect(try h.reader.idempotency("old") == nil)
        #expect(try h.reader.idempotency("new") != nil)

        clock.advance(seconds: 61)
        try h.sync()
        #expect(try h.reader.state().floorSeq == 4)
        #expect(try h.reader.state().changeCount == 0)
        #expect(try h.reader.state().headSeq == 4, "the head survives an empty log")
        #expect(try h.reader.idempotency("new") == nil)
        #expect(h.diagnostics.pruneFailures == 0)
    }

    /// The log is bounded by bytes too: 48 rewrites of a 1 MiB record keep
    /// 4 MiB of pushes under a 4 MiB bound, not 48 MiB; the oldest go first
    /// and the floor follows.
    @Test(arguments: Backend.allCases)
    func pruneByBytes(backend: Backend) throws {
        let mebibyte = 1 << 20
        let h = try StoreHarness(backend, durability: .off, retention: StoreRetention(maxBytes: 4 * mebibyte))
        let push = [UInt8](repeating: 0x61, count: mebibyte)
        for seq in Int64(1)...48 {
            h.store.submit(h.unit([.putRecord(record("big", version: seq, seq: seq))],
                                  changes: [StoredChange(seq: seq, time: testNow, kind: .record, name: "big", message: push)]))
        }
        try h.sync()
        let state = try h.reader.state()
        #expect(state.changeBytes == 4 * mebibyte)
        #expect(state.changeCount == 4)
        #expect(state.floorSeq == 44)
        #expect(state.headSeq == 48)
        #expect(try h.reader.changes(after: 0, limit: 100).map(\.seq) == [45, 46, 47, 48])
        #expect(h.diagnostics.pruneFailures == 0)
    }

    /// Small changes under a byte bound wait for the slack (1/64 of the
    /// bound), then everything over the bound goes in one step.
    @Test func byteSlackBatchesDeletes() {
        let policy = RetentionPolicy(retention: StoreRetention(maxBytes: 64_000), clock: .system)
        #expect(policy.byteSlack == 1_000)
        #expect(policy.excess(changeBytes: 64_999) == 0)
        #expect(policy.excess(changeBytes: 65_000) == 1_000)
        #expect(policy.excess(changeBytes: 70_000) == 6_000)
        #expect(RetentionPolicy(retention: StoreRetention(maxBytes: 0), clock: .system).excess(changeBytes: 1) == 1)
    }

    /// A failed prune step (a full disk) pauses retention for a second of
    /// the clock instead of adding a failing transaction to every commit.
    @Test func aFailedStepPausesRetention() {
        let clock = ManualClock(1_700_000_000_000)
        var policy = RetentionPolicy(retention: StoreRetention(maxChanges: 1), clock: clock.storeClock)
        #expect(policy.isDue(changeCount: 10, changeBytes: 0))
        policy.stepFailed()
        #expect(policy.isPaused)
        #expect(!policy.isDue(changeCount: 10, changeBytes: 0))
        clock.advance(seconds: 1)
        #expect(!policy.isPaused)
        #expect(policy.isDue(changeCount: 10, changeBytes: 0))
    }
}
