/// When to prune and how much: shared by both backends so they keep the
/// same rows.
struct RetentionPolicy {
    /// Rows deleted per pruning transaction at most, so a prune never holds
    /// the write lock for long.
    static let stepLimit = 10_000

    let retention: StoreRetention
    let clock: StoreClock
    private var nextAgeCheck = Int64.min
    /// After a step failed, no step before this (clock milliseconds).
    private var pausedUntil = Int64.min

    init(retention: StoreRetention, clock: StoreClock) {
        self.retention = retention
        self.clock = clock
    }

    /// Pruning by count waits until the log is over by this much, so that a
    /// full log costs one delete transaction per `slack` changes instead of
    /// one extra fsync per commit.
    var slack: Int { max(1, min(Self.stepLimit, max(0, retention.maxChanges) / 64)) }

    /// How many of the oldest changes to delete now because of the count (0:
    /// none), at most `stepLimit`.
    func excess(changeCount: Int) -> Int {
        let over = changeCount - max(0, retention.maxChanges)
        return over >= slack ? min(over, Self.stepLimit) : 0
    }

    /// Whether more than one step is needed for the count.
    func excessNeedsMoreSteps(changeCount: Int) -> Bool {
        changeCount - max(0, retention.maxChanges) > Self.stepLimit
    }

    /// Pruning by bytes waits until the log is over by this much (1/64 of
    /// the bound, at least a byte), for the same reason as `slack`.
    var byteSlack: Int { max(1, max(0, retention.maxBytes) / 64) }

    /// How many bytes of the oldest changes to delete now because of the
    /// byte bound (0: none): everything over it, once over by the slack.
    func excess(changeBytes: Int) -> Int {
        let over = changeBytes - max(0, retention.maxBytes)
        return over >= byteSlack ? over : 0
    }

    /// The age limits in milliseconds since the epoch (rows with an older
    /// `time` go), when an age check is due: at most once per second of the
    /// clock.
    mutating func ageCutoffs() -> (changes: Int64, idempotency: Int64)? {
        let now = clock.now()
        guard now >= nextAgeCheck else { return nil }
        nextAgeCheck = now &+ 1_000
        return (now &- Self.millis(retention.maxAge), now &- Self.millis(retention.idempotencyMaxAge))
    }

    /// Whether a retention step has something to do now: the count or the
    /// bytes are over by a step's worth, or an age check is due
    /// (`ageCutoffs()` is not used up by asking) — and no failed step
    /// asked for a pause.
    func isDue(changeCount: Int, changeBytes: Int) -> Bool {
        let now = clock.now()
        guard now >= pausedUntil else { return false }
        return excess(changeCount: changeCount) > 0 || excess(changeBytes: changeBytes) > 0 || now >= nextAgeCheck
    }

    /// What one retention step deletes, decided once for every backend.
    struct Step {
        /// Oldest changes over the count bound (0: none).
        var countExcess: Int
        /// Bytes of the oldest changes over the byte bound (0: none).
        var byteExcess: Int
        /// The age limits, when an age check is due.
        var cutoffs: (changes: Int64, idempotency: Int64)?
        /// The count excess is larger than one step deletes.
        var needsMoreSteps: Bool
    }

    /// The step to take now for a log of `changeCount` changes and
    /// `changeBytes` bytes; nil while paused or when nothing is over.
    mutating func nextStep(changeCount: Int, changeBytes: Int) -> Step? {
        guard !isPaused else { return nil }
        let countExcess = excess(changeCount: changeCount)
        let byteExcess = excess(changeBytes: changeBytes)
        let cutoffs = ageCutoffs()
        guard countExcess > 0 || byteExcess > 0 || cutoffs != nil else { return nil }
        return Step(countExcess: countExcess, byteExcess: byteExcess, cutoffs: cutoffs,
                    needsMoreSteps: excessNeedsMoreSteps(changeCount: changeCount))
    }

    /// Whether a failed step asked for a pause that has not ended.
    var isPaused: Bool { clock.now() < pausedUntil }

    /// A step failed (a full disk, an I/O error): the next waits a second.
    /// Tried after every commit instead, a prune that cannot succeed would
    /// add a failing transaction to each commit of a disk already in trouble.
    mutating func stepFailed() {
        pausedUntil = clock.now() &+ 1_000
    }

    /// A step found more old rows than it could delete: check again at once.
    mutating func checkAgeAgainSoon() {
        nextAgeCheck = .min
    }

    private static func millis(_ seconds: Double) -> Int64 {
        guard seconds.isFinite else { return seconds > 0 ? Int64.max / 4 : 0 }
        return Int64(max(0, min(seconds * 1_000, Double(Int64.max / 4))))
    }
}
