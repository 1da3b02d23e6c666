/// How much of the change log and of the idempotency answers to keep.
public struct StoreRetention: Sendable, Equatable {
    /// The change log keeps at most about this many rows: pruning starts when
    /// it is over by a small slack (1/64 of it, at least 1, at most 10,000)
    /// so that deletes come in batches instead of one tiny transaction per
    /// commit.
    public var maxChanges: Int
    /// Changes older than this many seconds (by their `time`) are pruned,
    /// oldest seq first.
    public var maxAge: Double
    /// Idempotency answers older than this many seconds are forgotten.
    public var idempotencyMaxAge: Double

    public init(maxChanges: Int = 1_000_000, maxAge: Double = 7 * 86_400, idempotencyMaxAge: Double = 86_400) {
        self.maxChanges = maxChanges
        self.maxAge = maxAge
        self.idempotencyMaxAge = idempotencyMaxAge
    }
}
