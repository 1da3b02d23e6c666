@preconcurrency import Glibc
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore
import TallySQLite

/// Commit in place (`InPlaceCommitting.commitQueued`): a submitter that would otherwise
/// wait for the writer borrows the idle writer's connection and commits on
/// its own thread; never while the writer works, never two at once, and
/// retention still runs. On the backends that commit in place only
/// (`Backend.committingInPlace`: not PostgreSQL, whose store has no
/// connection to lend).
@Suite struct StoreInPlaceCommitTests {
    /// With the writer parked, the queue commits on the calling thread and
    /// is reported there before `commitQueued` returns.
    @Test(arguments: Backend.committingInPlace)
    func anIdleWriterLendsItsConnection(backend: Backend) async throws {
        let h = try StoreHarness(backend, hooks: StoreTestHooks(lending: .whenParked))
        try await h.waitUntilWriterParks()
        let unit = h.unit([.putRecord(record("here"))], changes: [change(1, .record, "here")])
        h.lender.submit(unit, wakeWriter: false)
        h.lender.commitQueued()

        let outcome = try #require(h.recorder.all.first { $0.tokens == [unit.token] }, "reported before returning")
        #expect(outcome.error == nil)
        #expect(outcome.inPlace)
        #expect(outcome.lastSeq == 1)
        #expect(try h.reader.record("here") != nil)
    }

    /// A writer in the middle of a commit keeps the queue: `commitQueued`
    /// returns at once and the writer commits it next, on its own thread.
    @Test(arguments: Backend.committingInPlace)
    func aBusyWriterKeepsTheQueue(backend: Backend) async throws {
        let held = HeldCommit()
        let h = try StoreHarness(backend, hooks: held.hooks)
        let first = h.unit([.putRecord(record("first"))], changes: [change(1, .record, "first")])
        h.store.submit(first)
        try held.entered.wait()
        let second = h.unit([.putRecord(record("second"))], changes: [change(2, .record, "second")])
        h.lender.submit(second, wakeWriter: false)
        h.lender.commitQueued()
        #expect(!h.recorder.all.contains { $0.tokens.contains(second.token) }, "not committed by the caller")
        held.release()

        let outcomes = try h.recorder.wait(for: [first.token, second.token])
        #expect(outcomes.allSatisfy { $0.error == nil && !$0.inPlace })
        #expect(h.recorder.all.flatMap(\.tokens) == [first.token, second.token])
    }

    /// While one thread has borrowed the connection, what others submit
    /// (waking the writer or not) waits, and the writer commits it after the
    /// borrower is done — in order, with no transaction nested in another.
    @Test(arguments: Backend.committingInPlace)
    func whatQueuesDuringABorrowGoesToTheWriterAfter(backend: Backend) async throws {
        let held = HeldCommit()
        let h = try StoreHarness(backend, hooks: held.hooks(lending: .whenParked))
        try await h.waitUntilWriterParks()
        let borrowed = h.unit([.putRecord(record("borrowed"))], changes: [change(1, .record, "borrowed")])
        let store = h.lender
        let borrower = try StoreThread.spawn(name: "borrower") {
            store.submit(borrowed, wakeWriter: false)
            store.commitQueued()
        }
        try held.entered.wait()
        let woken = h.unit([.putRecord(record("woken"))], changes: [change(2, .record, "woken")])
        let deferred = h.unit([.putRecord(record("deferred"))], changes: [change(3, .record, "deferred")])
        h.store.submit(woken)
        h.lender.submit(deferred, wakeWriter: false)
        h.lender.commitQueued()  // borrowed already: leaves it
        held.release()
        StoreThread.join(borrower)

        let outcomes = try h.recorder.wait(for: [borrowed.token, woken.token, deferred.token])
        #expect(outcomes.allSatisfy { $0.error == nil })
        #expect(outcomes[0].inPlace)
        #expect(!outcomes[1].inPlace && !outcomes[2].inPlace, "the writer took over what queued behind")
        #expect(h.recorder.all.flatMap(\.tokens) == [borrowed.token, woken.token, deferred.token])
        #expect(try h.reader.state().headSeq == 3)
    }

    /// Every commit borrowed, none by the writer: the log is still pruned
    /// to its retention, because a borrower that finds pruning due wakes
    /// the writer for it.
    @Test(arguments: Backend.committingInPlace)
    func retentionRunsWhenEveryCommitIsBorrowed(backend: Backend) async throws {
        let h = try StoreHarness(backend, retention: StoreRetention(maxChanges: 5),
                                 hooks: StoreTestHooks(lending: .whenParked))
        for seq in 1...40 {
            try await h.waitUntilWriterParks()
            let unit = h.unit([.putRecord(record("r", seq: Int64(seq)))], changes: [change(Int64(seq), .record, "r")])
            h.lender.submit(unit, wakeWriter: false)
            h.lender.commitQueued()
            #expect(h.recorder.all.last?.tokens == [unit.token], "commit \(seq) in place")
        }
        try await poll("the log pruned to 5 changes", timeoutMillis: 10_000) {
            try h.reader.state().changeCount <= 5
        }
        #expect(try h.reader.changes(after: 0, limit: 100).map(\.seq) == Array(36...40))
    }

    /// A store that committed lately does not lend: under load commits
    /// follow each other closely, and a borrower would hold up its loop.
    @Test(arguments: Backend.committingInPlace)
    func aBusyStoreDoesNotLend(backend: Backend) async throws {
        let rule = LendingRule(afterIdleNanos: 60_000_000_000, maxCommitNanos: .max)  // idle a minute: never here
        let h = try StoreHarness(backend, hooks: StoreTestHooks(lending: rule))
        try h.commit([.putRecord(record("first"))])
        try await expectTheWriterCommitsTheNextUnit(h)
    }

    /// After a slow commit (a slow disk) the store does not lend: the
    /// borrower would be held up that long. (Slow here: longer than 0 ns,
    /// which every commit is.)
    @Test(arguments: Backend.committingInPlace)
    func aSlowCommitKeepsTheNextOnTheWriter(backend: Backend) async throws {
        let rule = LendingRule(afterIdleNanos: 0, maxCommitNanos: 0)
        let h = try StoreHarness(backend, hooks: StoreTestHooks(lending: rule))
        try h.commit([.putRecord(record("slow"))])
        try await expectTheWriterCommitsTheNextUnit(h)
    }

    /// With the writer parked but the rule against lending, a unit queued
    /// for `commitQueued` is committed by the writer, woken for it.
    private func expectTheWriterCommitsTheNextUnit(_ h: StoreHarness) async throws {
        try await poll("the writer to park", timeoutMillis: 10_000, intervalMillis: 1) { h.probe.isParked }
        #expect(!h.probe.wouldLend)
        let next = h.unit([.putRecord(record("next"))])
        h.lender.submit(next, wakeWriter: false)
        h.lender.commitQueued()
        let outcome = try h.recorder.wait(for: [next.token])[0]
        #expect(outcome.error == nil)
        #expect(!outcome.inPlace, "the writer committed it")
    }

    /// A database locked by another process is not waited for on the
    /// borrowing thread (an event loop must not sleep 5 s in SQLite's busy
    /// handler): the units go back to the writer, which waits and commits.
    @Test func aLockHeldElsewhereIsLeftToTheWriter() async throws {
        let h = try StoreHarness(.sqlite, hooks: StoreTestHooks(lending: .whenParked))
        let path = try #require(h.directory).path + "/" + SQLiteStore.fileName
        // Parked first: the writer's own start-up retention step would wait for the lock.
        try await h.waitUntilWriterParks()
        let other = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        try other.execute("BEGIN IMMEDIATE")
        let unit = h.unit([.putRecord(record("later"))], changes: [change(1, .record, "later")])
        h.lender.submit(unit, wakeWriter: false)
        let began = monotonicMillis()
        h.lender.commitQueued()
        #expect(monotonicMillis() - began < 2_000, "the caller did not wait out the 5 s busy timeout")
        #expect(h.recorder.all.isEmpty, "nothing reported: the units went back to the queue")
        try other.execute("ROLLBACK")
        other.close()

        let outcome = try h.recorder.wait(for: [unit.token])[0]
        #expect(outcome.error == nil)
        #expect(!outcome.inPlace, "committed by the writer")
        #expect(try h.reader.record("later") != nil)
    }

    /// `close` from inside `onCommit` on a borrowing thread asks the writer
    /// to stop instead of waiting for itself.
    @Test(arguments: Backend.committingInPlace)
    func closeFromABorrowersReportDoesNotDeadlock(backend: Backend) async throws {
        let h = try StoreHarness(backend, hooks: StoreTestHooks(lending: .whenParked), start: false)
        let store = h.lender
        let recorder = h.recorder
        store.start { outcome in
            recorder.record(outcome)
            if outcome.inPlace { store.close() }
        }
        try await h.waitUntilWriterParks()
        let unit = h.unit([.putRecord(record("last"))])
        store.submit(unit, wakeWriter: false)
        store.commitQueued()
        #expect(try h.recorder.wait(for: [unit.token])[0].inPlace)
        store.close()  // returns once the writer has stopped
        let late = h.unit()
        store.submit(late)
        #expect(try h.recorder.wait(for: [late.token])[0].error == StoreError.closed)
    }
}
