@preconcurrency import Glibc
import CSQLite
import TallyConcurrency

/// The queue between submitters and the one writer thread, and the writer
/// loop that drains it: group commit.
///
/// `submit` appends under a mutex and wakes the writer only if it is
/// waiting. The writer takes everything queued at once (whatever arrived
/// while the previous commit was syncing), commits it in one transaction and
/// reports it with one `onCommit` call. Batches therefore grow with the load
/// by themselves: one fsync is shared by every unit that arrived during the
/// previous one.
///
/// A unit that fails does not take the units before it down: the
/// transaction is rolled back, the units before it are committed again on
/// their own, and the failing unit is reported. Every unit submitted after
/// it is then reported as `discarded`, never tried, until the submitter
/// calls `resumeAfterFailure`: a submitter such as the hub builds each unit
/// on the state the ones before it left, so a unit behind a failed one
/// would store state that never existed (a version 3 whose version 2 was
/// lost). The submitter rolls its own state back to what was committed,
/// then resumes, and from there on units are tried again — so when the
/// disk has room again, the next write simply succeeds. `onCommit` calls
/// stay in submission order.
///
/// Commit in place: a submitter that is about to wait for nothing else (an
/// event loop at the end of its iteration) may queue without waking the
/// writer and then call `commitQueued`. If the writer is parked, that thread
/// takes the queue and commits it itself, and `onCommit` runs there: a lone
/// write then costs no thread wake-up before its commit and none after it.
/// The writer stays parked meanwhile and takes over whatever queued up once
/// the borrowing thread is done. Only a store idle for 2 ms lends
/// (`LendingRule`): under load, commits follow each other closely and stay
/// on the writer thread, where their I/O holds up no event loop (measured:
/// lending under 100 closed-loop writers cost a fifth of their throughput).
/// Nor does a store whose last commit took longer than 2 ms (a slow disk):
/// the borrower would hold up its other work for that long.
final class GroupCommitter: @unchecked Sendable {
    private let state: ConditionLock<State>
    /// Serializes `close` calls from different threads.
    private let closing = Lock()
    /// Used by the writer thread, or by one borrower while `borrower` is set
    /// (handed over under the state's lock, never used by two at once).
    private let backend: any CommitBackend
    /// The backend, for tests that look at it before the writer starts.
    var writerBackend: any CommitBackend { backend }
    private let lending: LendingRule

    init(backend: any CommitBackend, lending: LendingRule = .standard) {
        self.backend = backend
        self.lending = lending
        state = ConditionLock(State(phase: .idle))
    }

    // MARK: Any thread

    /// Starts the writer thread. Later calls do nothing.
    func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) {
        let rejected: [StoreUnit] = state.withLock { s in
            guard case .idle = s.phase else { return [] }
            s.onCommit = onCommit
            do throws(StoreError) {
                // Spawned under the lock: the phase is never seen half-set.
                let thread = try StoreThread.spawn(name: "tally-store-w") { [self] in
                    run(onCommit)
                }
                s.phase = .running(thread)
                return []
            } catch {
                s.phase = .closed
                s.accepting = false
                s.startError = error
                defer { s.queue.removeAll() }
                return s.queue
            }
        }
        let error = state.withLock { $0.startError } ?? .closed
        for unit in rejected { onCommit(Self.rejection(unit, error)) }
    }

    /// Queues a unit. Never blocks on I/O. After `close` (or a failed start)
    /// the unit is reported as failed at once, on the caller's thread.
    ///
    /// With `wakeWriter: false` the writer is left parked: the caller must
    /// call `commitQueued()` once it holds nothing the commit report needs.
    func submit(_ unit: StoreUnit, wakeWriter: Bool = true) {
        let (queued, wake, onCommit, error): (Bool, Bool, (@Sendable (CommitOutcome) -> Void)?, StoreError?) =
            state.withLock { s in
                guard s.accepting else { return (false, false, s.onCommit, s.startError ?? .closed) }
                s.queue.append(unit)
                s.enqueued &+= 1
                guard wakeWriter, s.writerWaiting, s.borrower == nil else { return (true, false, nil, nil) }
                s.writerWaiting = false
                return (true, true, nil, nil)
            }
        if wake { state.signal() }
        if !queued, let onCommit, let error { onCommit(Self.rejection(unit, error)) }
    }

    /// Commits what is queued on the calling thread if the writer is parked
    /// (then `onCommit` runs here, before this returns); otherwise leaves it
    /// to the writer, waking it if nobody else will. Blocks for the commit's
    /// I/O, so only a thread that has nothing better to do meanwhile calls it.
    func commitQueued() {
        enum Plan { case nothing, wake, commit([StoreUnit], discarded: Int, StoreError?, @Sendable (CommitOutcome) -> Void) }
        let plan: Plan = state.withLock { s in
            // Empty: someone took it. Writer busy: it takes the queue after its batch.
            // Borrowed: the borrower wakes the writer for the rest when done.
            guard !s.queue.isEmpty, s.writerWaiting, s.borrower == nil else { return .nothing }
            guard s.lends(now: monotonicNanos(), by: lending), let onCommit = s.onCommit else {
                s.writerWaiting = false
                return .wake
            }
            s.borrower = pthread_self()
            defer { s.queue.removeAll(keepingCapacity: true) }
            return .commit(s.queue, discarded: s.discarded(ofTaken: s.queue.count), s.failure, onCommit)
        }
        switch plan {
        case .nothing:
            return
        case .wake:
            state.signal()
        case .commit(let batch, let discarded, let failure, let onCommit):
            let began = monotonicNanos()
            let handedBack = commit(batch, discarding: discarded, failure, onCommit, borrowed: true)
            let due = backend.maintenanceDue
            let ended = monotonicNanos()
            let wake: Bool = state.withLock { s in
                s.borrower = nil
                s.commitEnded(began: began, ended: ended)
                if !handedBack.isEmpty { s.queue.insert(contentsOf: handedBack, at: 0) }
                if due { s.maintenanceRequested = true }
                guard s.writerWaiting, !s.queue.isEmpty || s.maintenanceRequested || s.stopRequested else {
                    return false
                }
                s.writerWaiting = false
                return true
            }
            if wake { state.signal() }
        }
    }

    /// Ends the discarding that a failed unit started: units queued from
    /// now on are tried again; those queued before are still discarded
    /// (they were built on the failed unit's state). Does nothing when no
    /// failure is pending. See the type's comment.
    func resumeAfterFailure() {
        state.withLock { s in
            guard s.discardThrough == .max else { return }
            s.discardThrough = s.enqueued
        }
    }

    /// Commits what is queued, stops the writer and waits for it. Idempotent;
    /// a second caller waits for the first. Called from `onCommit` (on the
    /// writer thread or a borrower) it only asks the writer to stop after
    /// this batch.
    func close() {
        let insideOnCommit: Bool = state.withLock { s in
            if let borrower = s.borrower, StoreThread.isCurrent(borrower) { return true }
            if case .running(let thread) = s.phase, StoreThread.isCurrent(thread) { return true }
            return false
        }
        if insideOnCommit {
            state.withLock { $0.stopRequested = true }
            return
        }
        closing.withLock {
            if case .idle = state.withLock({ $0.phase }) {
                start(onCommit: { _ in })  // so that what is queued still commits
            }
            let thread: pthread_t? = state.withLock { s in
                s.stopRequested = true
                s.writerWaiting = false
                guard case .running(let thread) = s.phase, !s.joinClaimed else { return nil }
                s.joinClaimed = true
                return thread
            }
            state.signal()
            if let thread {
                StoreThread.join(thread)
                state.withLock { $0.phase = .closed }
            }
        }
    }

    /// Reads the shared state under its lock, with the lending rule
    /// (`WriterProbe`, for tests).
    func inspect<R>(_ body: (State, LendingRule) -> R) -> R {
        state.withLock { body($0, lending) }
    }

    /// Runs `body` with the backend before the writer thread has started
    /// (`applyBeforeStart`; tests inspect the write connection this way);
    /// nil once it has.
    func withIdleBackend<R>(_ body: (any CommitBackend) throws(StoreError) -> R) throws(StoreError) -> R? {
        guard state.withLock({ s in if case .idle = s.phase { true } else { false } }) else { return nil }
        return try body(backend)
    }

    /// Applies `units` in one transaction on the calling thread; only
    /// before the writer thread has started.
    func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError) {
        let result = try withIdleBackend { backend in backend.apply(units[...], waitForLocks: true) }
        switch result {
        case nil: throw StoreError(code: SQLITE_MISUSE, message: "the store has started", operation: "apply before start")
        case .committed?: return
        case .failed(_, let error)?: throw error
        }
    }

    private static func rejection(_ unit: StoreUnit, _ error: StoreError) -> CommitOutcome {
        CommitOutcome(tokens: [unit.token], lastSeq: 0, durationNanos: 0, error: error)
    }

    // MARK: Writer thread

    private enum Next {
        case commit
        case maintain
        case releaseHold
        case stop
    }

    /// The submitter will send no group for the transaction the backend
    /// holds open (see `CommitBackend.heldMillis`): the writer ends it once
    /// the queue is empty. Thread-safe; does nothing when nothing is held.
    func releaseHold() {
        let wake = state.withLock { s in
            s.releaseRequested = true
            defer { if s.writerWaiting { s.writerWaiting = false } }
            return s.writerWaiting
        }
        if wake { state.signal() }
    }

    private func run(_ onCommit: @Sendable (CommitOutcome) -> Void) {
        backend.willRun()
        var batch: [StoreUnit] = []
        batch.reserveCapacity(1_024)
        // Retention may be due from an earlier run (or a smaller limit now).
        var maintenancePending = true
        var lastCommit: (began: UInt64, ended: UInt64)?
        var discarded = 0
        var failure: StoreError?
        while true {
            // A held transaction is waited on for a while only.
            let held = backend.heldMillis
            let decide: (inout State) -> Next? = { s in
                if held == nil { s.releaseRequested = false }
                if let (began, ended) = lastCommit {
                    s.commitEnded(began: began, ended: ended)
                    lastCommit = nil
                }
                if s.borrower != nil {
                    // The borrower wakes us when it hands the backend back.
                    s.writerWaiting = true
                    return nil
                }
                if s.maintenanceRequested {
                    s.maintenanceRequested = false
                    maintenancePending = true
                }
                if !s.queue.isEmpty {
                    swap(&batch, &s.queue)  // the emptied batch keeps its capacity for the next round
                    discarded = s.discarded(ofTaken: batch.count)
                    failure = s.failure
                    return .commit
                }
                if held != nil, s.releaseRequested || s.stopRequested || maintenancePending {
                    s.releaseRequested = false
                    return .releaseHold
                }
                if s.stopRequested {
                    s.accepting = false
                    return .stop
                }
                if maintenancePending { return .maintain }
                s.writerWaiting = true
                return nil
            }
            let next: Next
            if let held {
                if let decided = state.wait(timeoutMillis: held, until: decide) {
                    next = decided
                } else {
                    state.withLock { $0.writerWaiting = false }
                    next = .releaseHold
                }
            } else {
                next = state.wait(until: decide)
            }
            switch next {
            case .releaseHold:
                backend.releaseHold()
                state.withLock { $0.releaseRequested = false }
            case .commit:
                let began = monotonicNanos()
                _ = commit(batch, discarding: discarded, failure, onCommit, borrowed: false)
                lastCommit = (began, monotonicNanos())
                batch.removeAll(keepingCapacity: true)
                maintenancePending = backend.maintain()
            case .maintain:
                maintenancePending = backend.maintain()
            case .stop:
                backend.finish()
                return
            }
        }
    }

    /// Commits `batch` in as few transactions as its failures allow and
    /// reports each transaction once. Its first `discarded` units are
    /// reported as discarded with `failure` and not tried. After a failure
    /// the rest of the batch is discarded too, and so is everything queued
    /// until `resumeAfterFailure`. A `borrowed` commit (not on the writer
    /// thread) does not wait for a database locked by another process: the
    /// units not yet committed are returned, for the writer to commit.
    private func commit(_ batch: [StoreUnit], discarding discarded: Int, _ failure: StoreError?,
                        _ onCommit: @Sendable (CommitOutcome) -> Void, borrowed: Bool) -> ArraySlice<StoreUnit> {
        func report(_ units: ArraySlice<StoreUnit>, _ lastSeq: Int64, _ began: UInt64, _ error: StoreError?,
                    discarded: Bool = false) {
            var tokens: [UInt64] = []
            tokens.reserveCapacity(units.count)
            for unit in units { tokens.append(unit.token) }
            onCommit(CommitOutcome(tokens: tokens, lastSeq: lastSeq, durationNanos: monotonicNanos() &- began,
                                   error: error, inPlace: borrowed, discarded: discarded))
        }
        /// Reports `units` as failed with `error` and the rest of the batch
        /// as discarded; from here on, what is queued is discarded too.
        /// Marked before reporting: the report may resume at once.
        func fail(_ units: ArraySlice<StoreUnit>, _ began: UInt64, _ error: StoreError) {
            state.withLock { s in
                s.discardThrough = .max
                s.failure = error
            }
            report(units, backend.headSeq, began, error)
            if units.endIndex < batch.endIndex {
                report(batch[units.endIndex...], backend.headSeq, monotonicNanos(), error, discarded: true)
            }
        }
        /// A borrower found the database locked by another process: what is
        /// not committed yet goes back to the writer, which waits for locks.
        func lockedWhileBorrowed(_ result: ApplyResult) -> Bool {
            guard borrowed, case .failed(nil, let error) = result else { return false }
            return error.isBusy
        }
        if discarded > 0 {
            report(batch[..<discarded], backend.headSeq, monotonicNanos(), failure ?? .discarded, discarded: true)
        }
        let start = batch.startIndex + discarded
        guard start < batch.endIndex else { return [] }
        let began = monotonicNanos()
        let result = backend.apply(batch[start...], waitForLocks: !borrowed)
        if lockedWhileBorrowed(result) { return batch[start...] }
        switch result {
        case .committed(let lastSeq):
            report(batch[start...], lastSeq, began, nil)
        case .failed(let index?, let error) where index > start:
            // The units before the failing one did nothing wrong: commit them again alone.
            let again = monotonicNanos()
            let retried = backend.apply(batch[start..<index], waitForLocks: !borrowed)
            if lockedWhileBorrowed(retried) { return batch[start...] }
            switch retried {
            case .committed(let lastSeq):
                report(batch[start..<index], lastSeq, again, nil)
                fail(batch[index...index], began, error)
            case .failed(_, let error):
                fail(batch[start..<index], again, error)
            }
        case .failed(let index?, let error):
            fail(batch[index...index], began, error)
        case .failed(nil, let error):
            fail(batch[start...], began, error)
        }
        return []
    }
}
