/// A count that other threads take down and one or more threads wait to see
/// reach zero: "every loop has finished its shutdown", "the answer has
/// arrived" (count 1). Built on `ConditionLock`.
public struct CountdownLatch: Sendable {
    private let remaining: ConditionLock<Int>

    public init(count: Int) {
        precondition(count >= 0, "a latch cannot count down from \(count)")
        remaining = ConditionLock(count)
    }

    /// Takes one off the count (never below zero); at zero, wakes every waiter.
    public func countDown() {
        let reachedZero = remaining.withLock { count -> Bool in
            guard count > 0 else { return false }
            count -= 1
            return count == 0
        }
        if reachedZero { remaining.broadcast() }
    }

    /// Blocks until the count is zero.
    public func wait() {
        remaining.wait { $0 == 0 ? () : nil }
    }

    /// Blocks until the count is zero or `timeoutMillis` passed; false on timeout.
    public func wait(timeoutMillis: Int) -> Bool {
        remaining.wait(timeoutMillis: timeoutMillis) { $0 == 0 ? true : nil } ?? false
    }

    /// Whether the count has reached zero.
    public var isOpen: Bool { remaining.withLock { $0 == 0 } }
}
