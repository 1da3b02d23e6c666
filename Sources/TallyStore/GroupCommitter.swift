@preconcurrency import Glibc

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
/// A unit that fails does not take its batch with it: the transaction is
/// rolled back, the units before it are committed again on their own, the
/// failing unit is reported alone, and the rest go on as the next batch.
/// `onCommit` calls stay in submission order.
final class GroupCommitter: @unchecked Sendable {
    private enum Phase {
        /// Not started; the backend waits here for its writer thread.
        case idle(any CommitBackend)
        case running(pthread_t)
        /// The writer thread has ended and been joined (or never started).
        case closed
    }

    private struct State {
        var phase: Phase
        var queue: [StoreUnit] = []
        var onCommit: (@Sendable (CommitOutcome) -> Void)?
        /// The writer is (about to be) blocked on the condition: submitters
        /// signal only then.
        var writerWaiting = false
        /// Set under the lock when the writer decides to stop with an empty
        /// queue; later submissions are rejected instead of being stranded.
        var accepting = true
        var stopRequested = false
        var joinClaimed = false
        var startError: StoreError?
    }

    private let state: Guarded<State>
    /// Serializes `close` calls from different threads.
    private let closing = Guarded(())

    init(backend: any CommitBackend) {
        state = Guarded(State(phase: .idle(backend)))
    }

    // MARK: Any thread

    /// Starts the writer thread. Later calls do nothing.
    func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) {
        let rejected: [StoreUnit] = state.withLock { s in
            guard case .idle(let backend) = s.phase else { return [] }
            s.onCommit = onCommit
            let handoff = Handoff(value: backend)
            do throws(StoreError) {
                // Spawned under the lock: the phase is never seen half-set.
                let thread = try StoreThread.spawn(name: "tally-store-w") { [self] in
                    run(handoff.value, onCommit)
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
    func submit(_ unit: StoreUnit) {
        let (queued, wake, onCommit, error): (Bool, Bool, (@Sendable (CommitOutcome) -> Void)?, StoreError?) =
            state.withLock { s in
                guard s.accepting else { return (false, false, s.onCommit, s.startError ?? .closed) }
                s.queue.append(unit)
                let wake = s.writerWaiting
                s.writerWaiting = false
                return (true, wake, nil, nil)
            }
        if wake { state.signal() }
        if !queued, let onCommit, let error { onCommit(Self.rejection(unit, error)) }
    }

    /// Commits what is queued, stops the writer and waits for it. Idempotent;
    /// a second caller waits for the first. Called from `onCommit` (the writer
    /// thread itself) it only asks the writer to stop after this batch.
    func close() {
        if case .running(let thread) = state.withLock({ $0.phase }), StoreThread.isCurrent(thread) {
            state.withLock { $0.stopRequested = true }
            return
        }
        closing.withLock { _ in
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

    /// Runs `body` with the backend before the writer thread has started
    /// (tests inspect the write connection this way); nil once it has.
    func withIdleBackend<R>(_ body: (any CommitBackend) throws(StoreError) -> R) throws(StoreError) -> R? {
        let backend: (any CommitBackend)? = state.withLock { s in
            if case .idle(let backend) = s.phase { return backend }
            return nil
        }
        guard let backend else { return nil }
        return try body(backend)
    }

    private static func rejection(_ unit: StoreUnit, _ error: StoreError) -> CommitOutcome {
        CommitOutcome(tokens: [unit.token], lastSeq: 0, durationNanos: 0, error: error)
    }

    // MARK: Writer thread

    private enum Next {
        case commit
        case maintain
        case stop
    }

    private func run(_ backend: any CommitBackend, _ onCommit: @Sendable (CommitOutcome) -> Void) {
        backend.willRun()
        var batch: [StoreUnit] = []
        batch.reserveCapacity(1_024)
        // Retention may be due from an earlier run (or a smaller limit now).
        var maintenancePending = true
        while true {
            let next: Next = state.wait { s in
                if !s.queue.isEmpty {
                    swap(&batch, &s.queue)  // the emptied batch keeps its capacity for the next round
                    return .commit
                }
                if s.stopRequested {
                    s.accepting = false
                    return .stop
                }
                if maintenancePending { return .maintain }
                s.writerWaiting = true
                return nil
            }
            switch next {
            case .commit:
                commit(batch, backend, onCommit)
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
    /// reports each transaction once.
    private func commit(_ batch: [StoreUnit], _ backend: any CommitBackend,
                        _ onCommit: @Sendable (CommitOutcome) -> Void) {
        var start = batch.startIndex
        while start < batch.endIndex {
            let began = monotonicNanos()
            switch backend.apply(batch[start...]) {
            case .committed(let lastSeq):
                report(batch[start...], lastSeq, began, nil, onCommit)
                start = batch.endIndex
            case .failed(let index?, let error):
                if index > start {
                    // The units before the failing one did nothing wrong: commit them again alone.
                    let again = monotonicNanos()
                    switch backend.apply(batch[start..<index]) {
                    case .committed(let lastSeq):
                        report(batch[start..<index], lastSeq, again, nil, onCommit)
                    case .failed(_, let error):
                        report(batch[start..<index], backend.headSeq, again, error, onCommit)
                    }
                }
                report(batch[index...index], backend.headSeq, began, error, onCommit)
                start = index + 1
            case .failed(nil, let error):
                report(batch[start...], backend.headSeq, began, error, onCommit)
                start = batch.endIndex
            }
        }
    }

    private func report(_ units: ArraySlice<StoreUnit>, _ lastSeq: Int64, _ began: UInt64, _ error: StoreError?,
                        _ onCommit: @Sendable (CommitOutcome) -> Void) {
        var tokens: [UInt64] = []
        tokens.reserveCapacity(units.count)
        for unit in units { tokens.append(unit.token) }
        onCommit(CommitOutcome(tokens: tokens, lastSeq: lastSeq, durationNanos: monotonicNanos() &- began,
                               error: error))
    }
}
