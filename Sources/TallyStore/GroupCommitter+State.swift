@preconcurrency import Glibc

extension GroupCommitter {
    /// Where the writer thread is in its life.
    enum Phase {
        /// Not started.
        case idle
        case running(pthread_t)
        /// The writer thread has ended and been joined (or never started).
        case closed
    }

    /// Everything the submitters, the writer and a borrower share, behind
    /// `state`'s lock.
    struct State {
        var phase: Phase
        var queue: [StoreUnit] = []
        /// Units ever queued: the last one queued is number `enqueued`
        /// (units handed back by a borrower keep their numbers).
        var enqueued: UInt64 = 0
        /// Units numbered up to this are discarded, not tried: `.max`
        /// from a failure until `resumeAfterFailure`, then the number of
        /// the last unit queued before the resume.
        var discardThrough: UInt64 = 0
        /// The failure the discarded units are reported with.
        var failure: StoreError?
        var onCommit: (@Sendable (CommitOutcome) -> Void)?
        /// The writer is (about to be) blocked on the condition: submitters
        /// signal only then.
        var writerWaiting = false
        /// The thread that borrowed the backend (`commitQueued`); the writer
        /// does not touch it until that thread hands it back.
        var borrower: pthread_t?
        /// A borrower saw retention due: the writer runs a step when it wakes.
        var maintenanceRequested = false
        /// The submitter has nothing more for a transaction the backend
        /// holds open (`CommitBackend.heldMillis`): end it unless units are queued.
        var releaseRequested = false
        /// When the last commit ended (monotonic nanoseconds), and how long it took.
        var lastCommitEnded: UInt64 = 0
        var lastCommitTook: UInt64 = 0
        /// Set under the lock when the writer decides to stop with an empty
        /// queue; later submissions are rejected instead of being stranded.
        var accepting = true
        var stopRequested = false
        var joinClaimed = false
        var startError: StoreError?

        /// Whether a submitter may borrow the backend now: the writer parked,
        /// nobody else borrowing, the store idle and its commits quick.
        func lends(now: UInt64, by rule: LendingRule) -> Bool {
            guard case .running = phase, writerWaiting, borrower == nil, !stopRequested, !maintenanceRequested
            else { return false }
            return now &- lastCommitEnded >= rule.afterIdleNanos && lastCommitTook <= rule.maxCommitNanos
        }

        var parkedWithNothingToDo: Bool {
            writerWaiting && borrower == nil && queue.isEmpty && !maintenanceRequested
        }

        mutating func commitEnded(began: UInt64, ended: UInt64) {
            lastCommitEnded = ended
            lastCommitTook = ended &- began
        }

        /// How many units at the front of a batch just taken from the
        /// queue (`count` units, the queue's last ones) are to be discarded.
        func discarded(ofTaken count: Int) -> Int {
            let first = enqueued &- UInt64(count) &+ 1
            guard discardThrough >= first else { return 0 }
            return Int(min(UInt64(count), discardThrough - first + 1))
        }
    }
}
