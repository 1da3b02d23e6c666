/// What the group committer needs from a backend: apply units in one
/// transaction, prune in small steps, clean up. Implemented by SQLite and by
/// the in-memory tables; used by one thread at a time: the writer thread, or
/// a thread that borrowed it while the writer was parked (see
/// `GroupCommitter.commitQueued`).
protocol CommitBackend: AnyObject {
    /// Called once on the writer thread before the first commit.
    func willRun()

    /// Applies `units` in one transaction, in order. On failure nothing of
    /// them is applied; `unitIndex` (an index of `units`) names the unit that
    /// failed, nil when the transaction itself failed (BEGIN, COMMIT, I/O).
    /// Without `waitForLocks`, a database locked by another process fails at
    /// once with a busy error (unitIndex nil) instead of being waited for.
    func apply(_ units: ArraySlice<StoreUnit>, waitForLocks: Bool) -> ApplyResult

    /// One bounded retention step when one is due. Returns true when more is
    /// left to prune right away (the writer calls again when idle).
    func maintain() -> Bool

    /// Whether `maintain` has something to do now; cheap (no I/O), so a
    /// borrower can ask it after every commit.
    var maintenanceDue: Bool { get }

    /// The highest committed change seq.
    var headSeq: Int64 { get }

    /// Set while the backend keeps a transaction open for the next group
    /// (a shared store holding the head row after a group built on an old
    /// head: the submitter's next group, built on the new one, then cannot
    /// lose to another writer again): how long the writer waits for that
    /// group before `releaseHold()`. Nil for backends that hold nothing.
    var heldMillis: Int? { get }

    /// Ends the transaction held open; called by the writer when no group
    /// came in time, or the submitter said none will.
    func releaseHold()

    /// Called once on the writer thread after the last commit: close
    /// connections, stop helper threads.
    func finish()
}

extension CommitBackend {
    var heldMillis: Int? { nil }
    func releaseHold() {}
}

enum ApplyResult {
    case committed(lastSeq: Int64)
    case failed(unitIndex: Int?, StoreError)
}

/// When a parked writer lends its connection to a submitter (see
/// `GroupCommitter.commitQueued`). Tests choose another through
/// `StoreTestHooks.lending`.
@_spi(Testing) public struct LendingRule: Sendable {
    /// How long the store must have been idle (no commit ending). At light
    /// load — a write now and then — a thread wake-up costs more than
    /// blocking the submitter for one commit; under load the gaps between
    /// commits are far shorter.
    public var afterIdleNanos: UInt64
    /// The longest last commit after which it still lends (about 0.2–1.5 ms
    /// here; a disk that needs more keeps commits on the writer thread).
    public var maxCommitNanos: UInt64

    public init(afterIdleNanos: UInt64, maxCommitNanos: UInt64) {
        self.afterIdleNanos = afterIdleNanos
        self.maxCommitNanos = maxCommitNanos
    }

    static let standard = LendingRule(afterIdleNanos: 2_000_000, maxCommitNanos: 2_000_000)
    /// Whenever the writer is parked: tests of the hand-over itself, which
    /// must not depend on how fast a loaded machine syncs.
    public static let whenParked = LendingRule(afterIdleNanos: 0, maxCommitNanos: .max)
}

/// Test-only ways into the writer: fail a unit in the middle, fail a
/// whole transaction, pause before COMMIT, lend by another rule. Empty in
/// production; tests pass them to the stores' `@_spi(Testing)` initializers.
@_spi(Testing) public struct StoreTestHooks: Sendable {
    /// Called after each mutation of each unit is applied inside the
    /// transaction; a returned error fails the unit there.
    var afterMutation: (@Sendable (_ token: UInt64, _ mutationIndex: Int) -> StoreError?)?
    /// SQLite: called inside the transaction right before COMMIT.
    /// Memory: called before the batch is applied (the tables' lock is not
    /// held, so the hook may read through a reader).
    var beforeCommit: (@Sendable (_ tokens: [UInt64]) -> Void)?
    /// Called where `beforeCommit` is, after it; a returned error fails the
    /// whole transaction, as a COMMIT that found the disk full does.
    var failCommit: (@Sendable (_ tokens: [UInt64]) -> StoreError?)?
    /// Replaces `LendingRule.standard`.
    var lending: LendingRule?
    /// SQLite: replaces `SQLiteListWrites.defaultBlockSize` (small blocks
    /// split and merge after a few entries).
    var listBlockSize: Int?

    public init(afterMutation: (@Sendable (UInt64, Int) -> StoreError?)? = nil,
         beforeCommit: (@Sendable ([UInt64]) -> Void)? = nil,
         failCommit: (@Sendable ([UInt64]) -> StoreError?)? = nil, lending: LendingRule? = nil,
         listBlockSize: Int? = nil) {
        self.listBlockSize = listBlockSize
        self.afterMutation = afterMutation
        self.beforeCommit = beforeCommit
        self.failCommit = failCommit
        self.lending = lending
    }
}
