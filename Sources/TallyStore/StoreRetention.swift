/// How much of the change log and of the idempotency answers to keep.
public struct StoreRetention: Sendable, Equatable {
    /// The change log keeps at most about this many rows: pruning starts when
    /// it is over by a small slack (1/64 of it, at least 1, at most 10,000)
    /// so that deletes come in batches instead of one tiny transaction per
    /// commit.
    public var maxChanges: Int
    /// The change log keeps at most about this many bytes of pushes (the
    /// `message` of each change; pruning starts when it is over by 1/64 of
    /// it): a record rewritten often and large would otherwise keep the
    /// log far bigger than the change count suggests (48 rewrites of a
    /// 1 MiB record are 48 MiB). 1 GiB by default: a million typical
    /// changes of a few hundred bytes stay within it, so the count decides
    /// for ordinary data and the bytes only for large records.
    public var maxBytes: Int
    /// Changes older than this many seconds (by their `time`) are pruned,
    /// oldest seq first.
    public var maxAge: Double
    /// Idempotency answers older than this many seconds are forgotten.
    public var idempotencyMaxAge: Double

    public static let defaultMaxBytes = 1 << 30

    public init(maxChanges: Int = 1_000_000, maxBytes: Int = StoreRetention.defaultMaxBytes,
                maxAge: Double = 7 * 86_400, idempotencyMaxAge: Double = 86_400) {
        self.maxChanges = maxChanges
        self.maxBytes = maxBytes
        self.maxAge = maxAge
        self.idempotencyMaxAge = idempotencyMaxAge
    }
}
