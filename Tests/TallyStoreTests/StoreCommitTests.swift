@preconcurrency import Glibc
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// Group commit, atomicity and isolation, one body for both backends.
@Suite struct StoreCommitTests {
    /// A unit that fails half-way leaves nothing and takes none of the units
    /// before it in the same batch with it; the units behind it are
    /// discarded untried (they were built on its state), and outcomes stay
    /// in order.
    @Test(arguments: Backend.allCases)
    func failingUnitIsAtomicAndWhatFollowsIsDiscarded(backend: Backend) throws {
        let poisoned: UInt64 = 2
        let hooks = StoreTestHooks(afterMutation: { token, index in
            token == poisoned && index == 1
                ? StoreError(code: 1, message: "test failure", operation: "test hook") : nil
        })
        let h = try StoreHarness(backend, hooks: hooks, start: false)
        // Queued before the writer starts: all four are one batch.
        let units = [
            h.unit([.putRecord(record("before"))], changes: [change(1, .record, "before")]),
            h.unit([.putRecord(record("bad/1")), .putRecord(record("bad/2")), .putRecord(record("bad/3"))],
                   changes: [change(2, .record, "bad/1")],
                   idempotency: StoredIdempotency(key: "bad", seq: 2, time: testNow, response: [1])),
            h.unit([.putRecord(record("after"))], changes: [change(3, .record, "after")]),
            h.unit([.putRecord(record("later"))], changes: [change(4, .record, "later")]),
        ]
        for unit in units { h.store.submit(unit) }
        h.startWriter()
        _ = try h.recorder.wait(for: units.map(\.token))

        let outcomes = h.recorder.all
        #expect(outcomes.map(\.tokens) == [[1], [2], [3, 4]])
        #expect(outcomes.map { $0.error == nil } == [true, false, false])
        #expect(outcomes.map(\.discarded) == [false, false, true])
        #expect(outcomes[1].error?.message == "test failure")
        #expect(outcomes[2].error == outcomes[1].error, "discarded with the failure that caused it")
        #expect(outcomes.map(\.lastSeq) == [1, 1, 1])
        #expect(try h.reader.records(prefix: "bad/", after: nil, limit: 10).isEmpty)
        #expect(try h.reader.idempotency("bad") == nil)
        #expect(try h.reader.record("before") != nil)
        #expect(try h.reader.record("after") == nil)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1])
        #expect(try h.reader.state().headSeq == 1)
        #expect(try h.reader.state().changeCount == 1)
    }

    /// A change seq used twice is a constraint violation in every backend,
    /// and the unit's other writes are undone. (Seqs follow the head: a
    /// shared store refuses a unit whose first change does not.)
    @Test(arguments: Backend.allCases)
    func duplicateChangeSeqFailsTheUnit(backend: Backend) throws {
        let h = try StoreHarness(backend)
        try h.commit(changes: [change(1, .record, "x")])
        let outcome = try h.commit([h.unit([.putRecord(record("y"))], changes: [change(2, .record, "y"), change(1, .record, "y")])])[0]
        let error = try #require(outcome.error)
        #expect(error.isConstraintViolation)
        #expect(error.code == StoreError.constraintPrimaryKey)
        #expect(outcome.lastSeq == 1)
        #expect(try h.reader.record("y") == nil)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1])
        #expect(try h.reader.state().headSeq == 1)
        // The store goes on once the submitter has dropped what it built on the failed unit.
        h.store.resumeAfterFailure()
        #expect(try h.commit(changes: [change(2, .record, "y")]).lastSeq == 2)
    }

    /// While one commit is in progress, everything submitted meanwhile goes
    /// into the next transaction: 1000 units, 2 onCommit calls, tokens in order.
    @Test(arguments: Backend.allCases)
    func groupCommitTakesEverythingQueued(backend: Backend) throws {
        let held = HeldCommit()
        let h = try StoreHarness(backend, hooks: held.hooks)
        let units = (0..<1_000).map { i in
            h.unit([.putRecord(record("r/\(i)", seq: Int64(i + 1)))], changes: [change(Int64(i + 1), .record, "r/\(i)")])
        }
        h.store.submit(units[0])
        try held.entered.wait()
        for unit in units.dropFirst() { h.store.submit(unit) }
        held.release()
        let outcomes = try h.recorder.wait(for: units.map(\.token))

        #expect(outcomes.allSatisfy { $0.error == nil })
        let calls = h.recorder.all
        #expect(calls.count == 2)
        #expect(calls.flatMap(\.tokens) == units.map(\.token))
        #expect(calls.last?.lastSeq == 1_000)
        #expect(try h.reader.records(prefix: "r/", after: nil, limit: 2_000).count == 1_000)
    }

    /// Submitted from several threads at once, every unit commits exactly once.
    @Test(arguments: Backend.allCases)
    func concurrentSubmitters(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let threads = 4
        let perThread = 250
        let store = h.store
        var submitters: [pthread_t] = []
        var tokens: [UInt64] = []
        for t in 0..<threads {
            let units = (0..<perThread).map { i in
                StoreUnit(mutations: [.putRecord(record("t\(t)/\(i)"))], token: UInt64(1_000_000 + t * perThread + i))
            }
            tokens += units.map(\.token)
            submitters.append(try StoreThread.spawn(name: "submitter") {
                for unit in units { store.submit(unit) }
            })
        }
        for thread in submitters { StoreThread.join(thread) }
        let outcomes = try h.recorder.wait(for: tokens)
        #expect(outcomes.allSatisfy { $0.error == nil })
        #expect(h.recorder.all.flatMap(\.tokens).count == threads * perThread)
        #expect(try h.reader.state().recordCount == threads * perThread)
    }

    /// Inside a transaction, before COMMIT, another reader sees none of it;
    /// once onCommit has run, it sees all of it.
    @Test(arguments: Backend.allCases)
    func readersSeeOnlyCommittedData(backend: Backend) throws {
        let seenDuringCommit = Latch()
        let sawNothing = Latch()
        let readerBox = ReaderBox()
        let hooks = StoreTestHooks(beforeCommit: { tokens in
            guard tokens.contains(1), let reader = readerBox.reader else { return }
            if (try? reader.records(prefix: "p/", after: nil, limit: 10).isEmpty) == true { sawNothing.open() }
            seenDuringCommit.open()
        })
        let h = try StoreHarness(backend, hooks: hooks, start: false)
        readerBox.reader = try h.store.makeReader()
        h.startWriter()
        try h.commit([h.unit((0..<5).map { .putRecord(record("p/\($0)")) })])
        try seenDuringCommit.wait()
        try sawNothing.wait(seconds: 0)
        #expect(try h.reader.records(prefix: "p/", after: nil, limit: 10).count == 5)
    }

    /// A reader polling on another thread never sees half a unit: five
    /// records written together always have the same version.
    @Test(arguments: Backend.allCases)
    func concurrentReaderNeverSeesHalfAUnit(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let stop = Latch()
        let torn = Flag()
        let polls = Counter()
        let reader = Handoff(value: try h.store.makeReader())
        let polling = try StoreThread.spawn(name: "reader") {
            while true {
                if let rows = try? reader.value.records(prefix: "p/", after: nil, limit: 10) {
                    if !rows.isEmpty && (rows.count != 5 || Set(rows.map(\.version)).count != 1) { torn.set() }
                    polls.increment()
                }
                if (try? stop.wait(seconds: 0)) != nil { break }
            }
        }
        for version in 1...100 {
            h.store.submit(h.unit((0..<5).map { .putRecord(record("p/\($0)", version: Int64(version))) }))
        }
        try h.sync()
        stop.open()
        StoreThread.join(polling)
        #expect(!torn.isSet)
        #expect(polls.value > 0)
    }

    @Test(arguments: Backend.allCases)
    func closeIsIdempotentAndLaterSubmitsFail(backend: Backend) throws {
        let h = try StoreHarness(backend)
        try h.commit([.putRecord(record("kept"))])
        h.store.close()
        h.store.close()
        let late = h.unit([.putRecord(record("late"))])
        h.store.submit(late)
        let outcome = try h.recorder.wait(for: [late.token])[0]
        #expect(outcome.error == StoreError.closed)
        #expect(try h.reader.record("kept") != nil)
        #expect(try h.reader.record("late") == nil)
    }

    /// Units queued and never started still commit on close.
    @Test(arguments: Backend.allCases)
    func closeCommitsWhatIsQueued(backend: Backend) throws {
        let h = try StoreHarness(backend, start: false)
        h.store.submit(h.unit([.putRecord(record("queued"))], changes: [change(1, .record, "queued")]))
        h.store.close()
        #expect(try h.reader.record("queued") != nil)
        #expect(try h.reader.state().headSeq == 1)
    }
}

/// A reader handed to a hook after the store exists: set before the writer
/// thread starts, used only on it afterwards.
final class ReaderBox: @unchecked Sendable {
    var reader: (any StoreReading)?
}

final class Flag: @unchecked Sendable {
    private let latch = Latch()
    func set() { latch.open() }
    var isSet: Bool { (try? latch.wait(seconds: 0)) != nil }
}

final class Counter: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var count = 0
    init() {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }
    func increment() {
        pthread_mutex_lock(mutex)
        count += 1
        pthread_mutex_unlock(mutex)
    }
    var value: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return count
    }
}
