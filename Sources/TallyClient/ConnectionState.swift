import TallyProtocol

/// Where a `TallyClient`'s connection stands, as told to its state handler.
public enum ConnectionState: Sendable, Equatable, CustomStringConvertible {
    /// Opening the WebSocket, saying hello, resubscribing.
    case connecting
    /// Connected and every subscription current: requests flow.
    case live
    /// The connection was lost (or could not be made); attempt number
    /// `attempt` starts in `delayMs` milliseconds.
    case reconnecting(attempt: Int, delayMs: Int)
    /// Closed by `close()`: no more attempts.
    case offline

    public var description: String {
        switch self {
        case .connecting: "connecting"
        case .live: "live"
        case .reconnecting(let attempt, let delay): "reconnecting (attempt \(attempt) in \(delay) ms)"
        case .offline: "offline"
        }
    }
}

/// How far the client has come in bringing its subscriptions up to date
/// after a (re)connect, for progress displays: the steps that take time
/// while the state stays `.connecting`.
public enum SyncProgress: Sendable, Equatable {
    /// The hub asked this client to wait before resubscribing (the hello's
    /// `retryAfterMs`, sent for a while after the hub restarted).
    case waiting(delayMs: Int)
    /// The subscriptions went out; their answers are on the way.
    case subscribing
    /// A large snapshot comes page by page: `records` of `target` have
    /// arrived so far (the hub does not say how many there are in all).
    case receiving(target: SubscriptionTarget, records: Int)
}

/// Failures that happen on the client's side of the wire. They travel as
/// `ProtocolError`s like the hub's refusals, so a caller has one error type.
extension ErrorCode {
    /// The connection dropped before the reply came: the request may or may
    /// not have been applied (send it again with the same idempotency key).
    public static let disconnected = ErrorCode(rawValue: "disconnected")
    /// No reply, or no live connection, within the time allowed.
    public static let timeout = ErrorCode(rawValue: "timeout")
    /// The client was closed.
    public static let clientClosed = ErrorCode(rawValue: "client_closed")
    /// A reply the client could not read.
    public static let badReply = ErrorCode(rawValue: "bad_reply")
}

extension ProtocolError {
    /// True for failures that say nothing about the request itself: sending
    /// it again (with its idempotency key) later may succeed.
    public var isTransient: Bool {
        switch code {
        case .disconnected, .timeout, .shuttingDown, .storageFailed, .unavailable, .unauthorized, .badReply: true
        default: false
        }
    }

    /// True for the hub's own "not now" answers (its store failed, it cannot
    /// reach its database, it is stopping): this connection cannot serve,
    /// so the client drops it and tries again — on the next hub when it
    /// knows several — rather than wait for the hub to close it.
    public var isHubRetryable: Bool {
        switch code {
        case .storageFailed, .unavailable, .shuttingDown: true
        default: false
        }
    }

    /// The error a reply's `error` member describes.
    init(reply error: JSONObject?) {
        var details = error ?? [:]
        let code = details.removeValue(forKey: "code")?.stringValue ?? "error"
        let message = details.removeValue(forKey: "message")?.stringValue ?? "the hub refused the request"
        self.init(ErrorCode(rawValue: code), message, details: details)
    }
}
