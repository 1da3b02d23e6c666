/// How long to wait before the next reconnect attempt: exponential backoff
/// with "full jitter".
///
/// The ceiling doubles per failed attempt (250 ms, 500 ms, 1 s, … capped at
/// 30 s) and the delay is drawn uniformly from 0…ceiling. Full jitter
/// spreads a crowd of clients that lost the same hub over the whole window
/// instead of bunching them at the same instants (AWS Architecture Blog,
/// "Exponential Backoff And Jitter", 2015: full jitter needs the fewest
/// calls of the variants compared there).
public struct Backoff: Sendable, Equatable {
    public var baseMillis: Int
    public var factor: Int
    public var capMillis: Int

    public init(baseMillis: Int = 250, factor: Int = 2, capMillis: Int = 30_000) {
        self.baseMillis = max(1, baseMillis)
        self.factor = max(1, factor)
        self.capMillis = max(self.baseMillis, capMillis)
    }

    /// The longest delay of attempt `attempt` (1 for the first retry).
    public func ceiling(attempt: Int) -> Int {
        var value = baseMillis
        var step = 1
        while step < attempt, value < capMillis {
            value = value > capMillis / factor ? capMillis : value * factor
            step += 1
        }
        return min(value, capMillis)
    }

    /// A delay drawn uniformly from 0…`ceiling(attempt:)`.
    public func delay<G: RandomNumberGenerator>(attempt: Int, using generator: inout G) -> Int {
        Int.random(in: 0...ceiling(attempt: attempt), using: &generator)
    }
}
