/// What happened to one transaction, handed to `onCommit`.
public struct CommitOutcome: Sendable, Equatable {
    /// The tokens of the units in this transaction, in submission order.
    public var tokens: [UInt64]
    /// The highest committed change seq after this transaction (unchanged
    /// when it failed).
    public var lastSeq: Int64
    /// From `BEGIN` to the end of `COMMIT`, the fsync included.
    public var durationNanos: UInt64
    /// Non-nil: the transaction was rolled back, nothing of these units was
    /// applied.
    public var error: StoreError?
    /// Committed by a submitter that borrowed the idle writer's connection
    /// (`InPlaceCommitting.commitQueued`), not by the writer thread.
    public var inPlace: Bool
    /// These units were not tried: they were queued behind a unit that
    /// failed (reported before them, with `discarded` false) and before the
    /// submitter called `Store.resumeAfterFailure`. `error` is that failure.
    public var discarded: Bool

    public init(tokens: [UInt64], lastSeq: Int64, durationNanos: UInt64, error: StoreError?, inPlace: Bool = false,
                discarded: Bool = false) {
        self.tokens = tokens
        self.lastSeq = lastSeq
        self.durationNanos = durationNanos
        self.error = error
        self.inPlace = inPlace
        self.discarded = discarded
    }
}
