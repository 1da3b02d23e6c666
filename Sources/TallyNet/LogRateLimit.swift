import TallyConcurrency

/// Lets at most `burst` log lines through per interval and counts the rest,
/// so a client that sends refused requests as fast as it can costs the hub
/// a few lines a second, not a line per request (20,000 refused messages
/// once wrote 3.6 MiB of log in half a second). The first line after a
/// suppressed run says how many were dropped. Safe from any thread.
public final class LogRateLimit: Sendable {
    private struct Window {
        var start: Int64?
        var passed = 0
        var dropped = 0
    }

    private let state = LockedValueBox(Window())
    private let burst: Int
    private let intervalMillis: Int64

    public init(burst: Int = 10, intervalMillis: Int64 = 1000) {
        self.burst = burst
        self.intervalMillis = intervalMillis
    }

    /// nil: drop this line. Otherwise log it, with the count of lines
    /// dropped since the last one that went through (0 for none).
    public func admit(now: Int64) -> Int? {
        state.withLock { window in
            if window.start.map({ now - $0 >= intervalMillis }) ?? true {
                window.start = now
                window.passed = 0
            }
            guard window.passed < burst else {
                window.dropped += 1
                return nil
            }
            window.passed += 1
            defer { window.dropped = 0 }
            return window.dropped
        }
    }
}
