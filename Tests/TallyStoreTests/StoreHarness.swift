@preconcurrency import Glibc
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore
import TallyProtocol

/// The backends every contract test runs against. `postgres` stores in a
/// fresh database of the test process's own server (`PostgresCluster`).
enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite
    case memory
    case postgres

    var testDescription: String { rawValue }

    /// The backends that commit in place (`InPlaceCommitting`): PostgresStore
    /// does not (a commit waits for server round trips, which no event loop
    /// should), so the tests of lending its connection do not apply to it.
    static let committingInPlace: [Backend] = [.sqlite, .memory]
}

/// Collects commit outcomes from the writer thread and lets the test thread
/// wait for tokens (with a deadline, never a sleep).
final class CommitRecorder: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var outcomes: [CommitOutcome] = []
    private var byToken: [UInt64: CommitOutcome] = [:]

    init() {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func record(_ outcome: CommitOutcome) {
        pthread_mutex_lock(mutex)
        outcomes.append(outcome)
        for token in outcome.tokens { byToken[token] = outcome }
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    var all: [CommitOutcome] {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return outcomes
    }

    /// The outcome of each token, once all have one; fails after `seconds`.
    func wait(for tokens: [UInt64], seconds: Int = 10) throws -> [CommitOutcome] {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += seconds
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !tokens.allSatisfy({ byToken[$0] != nil }) {
            if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
                throw TestFailure("no outcome for tokens \(tokens.filter { byToken[$0] == nil }.prefix(5))…")
            }
        }
        return tokens.map { byToken[$0]! }
    }
}

/// A one-shot latch: `open()` once, `wait()` from any thread.
final class Latch: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var isOpen = false

    init() {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func open() {
        pthread_mutex_lock(mutex)
        isOpen = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    func wait(seconds: Int = 10) throws {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += seconds
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !isOpen {
            if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT { throw TestFailure("latch timed out") }
        }
    }
}

/// Stops the transaction of token 1 alone just before COMMIT until the test
/// lets it go: pass `hooks` to the harness, wait for `entered`, then
/// `release()`.
final class HeldCommit: Sendable {
    let entered = Latch()
    private let released = Latch()

    var hooks: StoreTestHooks { hooks(lending: nil) }

    func hooks(lending: LendingRule?) -> StoreTestHooks {
        StoreTestHooks(beforeCommit: { [entered, released] tokens in
            guard tokens == [1] else { return }
            entered.open()
            try? released.wait()
        }, lending: lending)
    }

    func release() { released.open() }
}

/// Moves a value that is not Sendable to the thread that will own it from
/// then on. Only for hand-overs where the sender never touches the value
/// again (a reader given to the thread that polls it).
struct Handoff<Value>: @unchecked Sendable {
    let value: Value
}

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var millis: Int64

    init(_ millis: Int64) {
        self.millis = millis
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    var now: Int64 {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return millis
    }

    func advance(seconds: Int64) {
        pthread_mutex_lock(mutex)
        millis += seconds * 1_000
        pthread_mutex_unlock(mutex)
    }

    var storeClock: StoreClock { StoreClock { [self] in now } }
}

/// One store of either backend, started, with a reader and a recorder.
final class StoreHarness {
    let backend: Backend
    let directory: TemporaryDirectory?
    let store: any Store
    let reader: any StoreReading
    let recorder = CommitRecorder()
    private var nextToken: UInt64 = 1

    init(_ backend: Backend, directory: TemporaryDirectory? = nil, durability: Durability = .full,
         retention: StoreRetention = .init(), clock: StoreClock = .system, hooks: StoreTestHooks = .init(),
         start: Bool = true) throws {
        self.backend = backend
        switch backend {
        case .sqlite:
            let directory = try directory ?? TemporaryDirectory(prefix: "tally-store")
            self.directory = directory
            store = try SQLiteStore(directory: directory.path, durability: durability, retention: retention,
                                    clock: clock, hooks: hooks)
        case .memory:
            self.directory = nil
            store = MemoryStore(retention: retention, clock: clock, hooks: hooks)
        case .postgres:
            // `durability` is the server's business (synchronous_commit), not the store's.
            self.directory = nil
            let url = try PostgresCluster.shared().createDatabase("store")
            store = try PostgresStore(url: url, retention: retention, clock: clock, hooks: hooks)
        }
        reader = try store.makeReader()
        if start { startWriter() }
    }

    deinit {
        store.close()
    }

    func startWriter() {
        store.start { [recorder] in recorder.record($0) }
    }

    /// The store as one that commits in place (`Backend.committingInPlace`).
    var lender: any InPlaceCommitting {
        guard let store = store as? any InPlaceCommitting else { fatalError("a store of this harness") }
        return store
    }

    var probe: WriterProbe {
        switch store {
        case let store as SQLiteStore: store.writerProbe
        case let store as MemoryStore: store.writerProbe
        default: fatalError("a store of this harness")
        }
    }

    /// Waits until the writer thread has parked and the store has been idle
    /// long enough: then `commitQueued` commits on the calling thread.
    func waitUntilWriterParks() async throws {
        try await poll("the store writer to park", timeoutMillis: 10_000, intervalMillis: 1) { probe.wouldLend }
    }

    var diagnostics: StoreDiagnostics {
        switch store {
        case let store as SQLiteStore: store.diagnostics.withLock { $0 }
        case let store as MemoryStore: store.diagnostics.withLock { $0 }
        case let store as PostgresStore: store.diagnostics.withLock { $0 }
        default: StoreDiagnostics()
        }
    }

    func token() -> UInt64 {
        defer { nextToken += 1 }
        return nextToken
    }

    func unit(_ mutations: [StoreMutation] = [], changes: [StoredChange] = [],
              idempotency: StoredIdempotency? = nil) -> StoreUnit {
        StoreUnit(mutations: mutations, changes: changes, idempotency: idempotency, token: token())
    }

    /// Submits the units and waits for all their outcomes.
    @discardableResult
    func commit(_ units: [StoreUnit]) throws -> [CommitOutcome] {
        for unit in units { store.submit(unit) }
        return try recorder.wait(for: units.map(\.token))
    }

    /// Commits one unit and fails the test if it failed.
    @discardableResult
    func commit(_ mutations: [StoreMutation] = [], changes: [StoredChange] = [],
                idempotency: StoredIdempotency? = nil) throws -> CommitOutcome {
        let outcome = try commit([unit(mutations, changes: changes, idempotency: idempotency)])[0]
        if let error = outcome.error { throw error }
        return outcome
    }

    /// Waits until everything submitted before has committed and the
    /// retention step after it has run: the writer prunes after reporting a
    /// commit, so a second empty unit is needed to see the prune finished.
    func sync() throws {
        try commit()
        try commit()
    }
}

// MARK: Values

/// Times in test values: now, so that the default age retention (7 days,
/// idempotency 24 h) keeps them.
let testNow: Int64 = StoreClock.system.now()

func record(_ name: String, version: Int64 = 1, seq: Int64 = 1) -> StoredRecord {
    StoredRecord(name: name, version: version, seq: seq, created: 1_000 + seq, updated: 2_000 + seq,
                 data: Array("{\"name\":\"\(name)\",\"v\":\(version)}".utf8))
}

func list(_ name: String, _ entries: [String], version: Int64 = 1, seq: Int64 = 1) -> StoredList {
    StoredList(name: name, version: version, seq: seq, created: 1_000 + seq, updated: 2_000 + seq, count: Int64(entries.count))
}

/// What a `setEntries` stores: the list's row, its old entries dropped, the
/// new ones at keys 0, 1, 2, …
func putList(_ name: String, _ entries: [String], version: Int64 = 1, seq: Int64 = 1) -> [StoreMutation] {
    [.putList(list(name, entries, version: version, seq: seq)), .clearListEntries(name)]
        + entries.enumerated().map { .insertListEntry(list: name, ListRow(key: ListKey(integer: Int64($0.offset)), entry: $0.element)) }
}

extension StoreReading {
    /// A list's entries in order, read through a cursor from the given end.
    func entries(_ name: String, descending: Bool = false, after: ListKey? = nil) throws -> [String] {
        let cursor = try listEntries(name, descending: descending, after: after)
        var entries: [String] = []
        while let row = try cursor.next() { entries.append(row.entry) }
        return entries
    }
}

func change(_ seq: Int64, _ kind: EntityKind = .record, _ name: String, time: Int64 = testNow) -> StoredChange {
    StoredChange(seq: seq, time: time, kind: kind, name: name,
                 message: Array("{\"op\":\"change\",\"seq\":\(seq),\"name\":\"\(name)\"}".utf8))
}
