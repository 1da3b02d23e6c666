/// The remembered answer to a command sent with an idempotency key, so a
/// retried command gets the same response instead of running twice.
public struct StoredIdempotency: Sendable, Equatable {
    public var key: String
    /// The change seq the command produced (or the head when it produced none).
    public var seq: Int64
    /// Milliseconds since the Unix epoch; retention compares it with the clock.
    public var time: Int64
    /// The response message bytes, returned as they are.
    public var response: [UInt8]

    public init(key: String, seq: Int64, time: Int64, response: [UInt8]) {
        self.key = key
        self.seq = seq
        self.time = time
        self.response = response
    }
}
