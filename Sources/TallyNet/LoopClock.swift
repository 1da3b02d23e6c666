import Synchronization

/// Where an event loop reads the time: its per-iteration `now`, its timers
/// and therefore every connection timeout (idle, ping, slow request, slow
/// handshake, close wait). Injected so that tests move time by hand
/// (`ManualClock`) instead of sleeping through a timeout.
public protocol LoopClock: Sendable {
    /// Milliseconds on a monotonic scale (the origin means nothing).
    func nowMillis() -> Int64
    /// How long `epoll_wait` may block while the next timer is due at
    /// `deadline` (nil: no timer): milliseconds, or -1 for "until an event".
    func waitMillis(until deadline: Int64?, now: Int64) -> Int32
}

/// The real clock: CLOCK_MONOTONIC.
public struct MonotonicClock: LoopClock {
    public init() {}

    public func nowMillis() -> Int64 { Sys.monotonicMillis() }

    public func waitMillis(until deadline: Int64?, now: Int64) -> Int32 {
        guard let deadline else { return -1 }
        return Int32(clamping: max(0, deadline - now))
    }
}

/// A clock that moves only when told to. A loop on it never wakes up for a
/// timer by itself: after `advance`, post any task to the loop (which wakes
/// it) and the timers that came due run in that iteration, after the task.
public final class ManualClock: LoopClock {
    private let current: Atomic<Int64>

    public init(startMillis: Int64 = 1_000_000) {
        current = Atomic(startMillis)
    }

    public func nowMillis() -> Int64 { current.load(ordering: .acquiring) }

    /// Moves the clock forward.
    public func advance(byMillis millis: Int64) {
        precondition(millis >= 0, "a monotonic clock does not go back")
        current.add(millis, ordering: .acquiringAndReleasing)
    }

    public func waitMillis(until deadline: Int64?, now: Int64) -> Int32 {
        guard let deadline, deadline <= now else { return -1 }
        return 0
    }
}
