@preconcurrency import Glibc
import CSQLite
import TallyConcurrency
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// A failed commit (a full disk, an I/O error) is reported, and everything
/// queued behind it is discarded untried until the submitter resumes: those
/// units were built on the failed one's state. After the resume the store
/// takes units again, so a store whose disk has room again goes on by
/// itself. One body for both backends, on the writer thread and borrowed.
@Suite struct StoreFailureTests {
    /// A COMMIT that fails (the hook stands in for SQLITE_FULL) fails its
    /// whole batch in one report; what queues behind it is discarded, never
    /// tried, until `resumeAfterFailure`; after it, the next unit commits
    /// with the seq the failed batch had.
    @Test(arguments: Backend.allCases)
    func aFailedCommitDiscardsWhatQueuesBehindItUntilResumed(backend: Backend) throws {
        let disk = FaultSwitch()
        let h = try StoreHarness(backend, hooks: disk.hooks, start: false)
        disk.isFull = true
        let batch = (1...3).map { seq in
            h.unit([.putRecord(record("r/\(seq)", seq: Int64(seq)))], changes: [change(Int64(seq), .record, "r/\(seq)")])
        }
        for unit in batch { h.store.submit(unit) }
        h.startWriter()
        let failed = try h.recorder.wait(for: batch.map(\.token))
        #expect(failed.allSatisfy { $0.tokens == batch.map(\.token) && !$0.discarded }, "one report for the batch")
        #expect(failed[0].error == FaultSwitch.full)
        #expect(failed[0].lastSeq == 0)
        #expect(disk.commitsTried == 1)

        // The disk has room again, but the submitter has not resumed: what it
        // queued still stood on the failed state, and is not tried.
        disk.isFull = false
        let stale = h.unit([.putRecord(record("r/4", seq: 4))], changes: [change(4, .record, "r/4")])
        let staleOutcome = try h.commit([stale])[0]
        #expect(staleOutcome.discarded)
        #expect(staleOutcome.error == FaultSwitch.full)
        #expect(disk.commitsTried == 1, "a discarded unit is never tried")

        h.store.resumeAfterFailure()
        h.store.resumeAfterFailure()  // a second resume changes nothing
        let fresh = try h.commit([.putRecord(record("r/1"))], changes: [change(1, .record, "r/1")])
        #expect(fresh.lastSeq == 1, "the failed seqs are free again: the log stays gap-free")
        #expect(try h.reader.records(prefix: "r/", after: nil, limit: 10).map(\.name) == ["r/1"])
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1])
    }

    /// The hub resumes from inside the failure report (on the committing
    /// thread): the rest of the failed batch, queued before the resume, is
    /// still discarded, and a unit queued after it commits.
    @Test(arguments: Backend.allCases)
    func aResumeInsideTheReportStillDiscardsTheRestOfTheBatch(backend: Backend) throws {
        let h = try StoreHarness(backend, hooks: StoreTestHooks(afterMutation: { token, _ in
            token == 2 ? StoreError(code: SQLITE_FULL, message: "database or disk is full", operation: "test") : nil
        }), start: false)
        let units = [
            h.unit([.putRecord(record("a"))], changes: [change(1, .record, "a")]),
            h.unit([.putRecord(record("b"))], changes: [change(2, .record, "b")]),
            h.unit([.putRecord(record("c"))], changes: [change(3, .record, "c")]),
        ]
        for unit in units { h.store.submit(unit) }
        let store = h.store
        let recorder = h.recorder
        store.start { outcome in
            recorder.record(outcome)
            if outcome.error != nil && !outcome.discarded { store.resumeAfterFailure() }
        }
        _ = try h.recorder.wait(for: units.map(\.token))
        #expect(h.recorder.all.map(\.tokens) == [[1], [2], [3]])
        #expect(h.recorder.all.map(\.discarded) == [false, false, true])
        #expect(try h.commit([.putRecord(record("b2"))], changes: [change(2, .record, "b2")]).lastSeq == 2)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1, 2])
        #expect(try h.reader.record("c") == nil)
    }

    /// A loop that borrowed the writer's connection and failed reports the
    /// failure itself; what it queues before resuming is discarded there
    /// too, and after the resume it commits in place again.
    /// Not on PostgreSQL: its store does not commit in place.
    @Test(arguments: Backend.committingInPlace)
    func aBorrowedCommitThatFailsDiscardsUntilResumed(backend: Backend) async throws {
        let disk = FaultSwitch()
        var hooks = disk.hooks
        hooks.lending = .whenParked
        let h = try StoreHarness(backend, hooks: hooks)
        disk.isFull = true
        try await h.waitUntilWriterParks()
        let first = h.unit([.putRecord(record("x"))], changes: [change(1, .record, "x")])
        h.lender.submit(first, wakeWriter: false)
        h.lender.commitQueued()
        let failed = try #require(h.recorder.all.last, "reported before commitQueued returned")
        #expect(failed.tokens == [first.token] && failed.inPlace && !failed.discarded)
        #expect(failed.error == FaultSwitch.full)

        disk.isFull = false
        try await h.waitUntilWriterParks()
        let stale = h.unit([.putRecord(record("y"))], changes: [change(2, .record, "y")])
        h.lender.submit(stale, wakeWriter: false)
        h.lender.commitQueued()
        let discarded = try h.recorder.wait(for: [stale.token])[0]
        #expect(discarded.discarded)
        #expect(disk.commitsTried == 1)

        h.store.resumeAfterFailure()
        try await h.waitUntilWriterParks()
        let fresh = h.unit([.putRecord(record("x"))], changes: [change(1, .record, "x")])
        h.lender.submit(fresh, wakeWriter: false)
        h.lender.commitQueued()
        let committed = try #require(h.recorder.all.last)
        #expect(committed.tokens == [fresh.token] && committed.error == nil && committed.inPlace)
        #expect(committed.lastSeq == 1)
        #expect(try h.reader.record("y") == nil)
    }
}

/// Stands in for a disk that fills up and empties again: while `isFull`,
/// every transaction fails at COMMIT with SQLITE_FULL, as SQLite's own
/// does when the WAL cannot grow.
final class FaultSwitch: Sendable {
    static let full = StoreError(code: SQLITE_FULL, message: "database or disk is full", operation: "commit")

    /// Whether commits fail, and how many reached COMMIT.
    private let state = LockedValueBox((full: false, tried: 0))

    var isFull: Bool {
        get { state.withLock { $0.full } }
        set { state.withLock { $0.full = newValue } }
    }

    /// Transactions that reached COMMIT (failed or not).
    var commitsTried: Int { state.withLock { $0.tried } }

    var hooks: StoreTestHooks {
        StoreTestHooks(failCommit: { [state] _ in
            state.withLock {
                $0.tried += 1
                return $0.full ? Self.full : nil
            }
        })
    }
}
