@preconcurrency import Glibc

/// Wall-clock time in milliseconds since the Unix epoch, injected so that
/// tests can age the change log without sleeping.
public struct StoreClock: Sendable {
    public var now: @Sendable () -> Int64

    public init(now: @escaping @Sendable () -> Int64) {
        self.now = now
    }

    /// `clock_gettime(CLOCK_REALTIME)`.
    public static let system = StoreClock {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000 + Int64(spec.tv_nsec) / 1_000_000
    }
}

/// Monotonic nanoseconds, for commit durations.
func monotonicNanos() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}
