/// A connection's phase and the timing rules that go with it, as a pure
/// state machine (the shape of hummingbird's `HTTPConnectionStateHandler`):
/// the connection reports events with the time they happened, the loop's
/// sweep asks `tick(at:)` what is due, and the connection performs the
/// answer. No socket, no clock: tests drive it with plain numbers, and the
/// loop drives it with the time of its (injectable) `LoopClock`.
///
/// The timeouts, each measured from the event named:
/// - connecting, the TLS handshake or the client's opening handshake:
///   `handshakeMillis` from entering the phase;
/// - HTTP, a request started and not complete: `requestMillis` from its
///   first byte (408, then close); no request: `keepAliveMillis` from the
///   last byte read or response released (close); none while a deferred
///   request is being answered elsewhere;
/// - WebSocket: `pingIntervalMillis` of silence sends one ping (until
///   something arrives again), `idleMillis` of silence closes with 1001;
/// - closing: `closeMillis` from entering the phase, then close TCP.
struct ConnectionStateMachine {
    enum Phase: Equatable {
        case connecting
        case tlsHandshake
        case http
        case clientHandshake
        case webSocket
        /// Draining: our close frame or final response is queued or sent;
        /// waiting for the peer's close frame or EOF.
        case closing
        case closed
    }

    struct Timeouts: Equatable {
        /// Connecting, TLS and the client handshake.
        var handshakeMillis: Int64
        /// A started request; nil where there is no HTTP phase (clients).
        var requestMillis: Int64?
        /// An idle keep-alive connection; nil where there is no HTTP phase.
        var keepAliveMillis: Int64?
        var pingIntervalMillis: Int64
        var idleMillis: Int64
        var closeMillis: Int64
    }

    /// What a sweep asks the connection to do.
    enum Action: Equatable {
        case none
        /// Connecting or a handshake took longer than the limit: fail and close.
        case handshakeTimedOut(limitMillis: Int64)
        /// A request was not complete within the limit: answer 408 and close.
        case requestTimedOut(limitMillis: Int64)
        /// A keep-alive connection sent no request within the limit: close.
        case keepAliveExpired
        /// Nothing arrived within the limit: close the WebSocket with 1001.
        case idleTimedOut(limitMillis: Int64)
        /// Silent past the ping interval: send one ping.
        case sendPing
        /// The peer did not finish closing within the limit: close TCP.
        case closeTimedOut
    }

    let timeouts: Timeouts
    private(set) var phase: Phase
    private var phaseStartedAt: Int64
    /// When bytes last arrived (or a deferred response was released).
    private var lastActivity: Int64
    /// When the current request's first byte arrived; nil between requests.
    private(set) var requestStartedAt: Int64?
    /// A request is being answered elsewhere (`HTTPAction.deferred`).
    private(set) var awaitingResponse = false
    /// A ping went out and nothing has arrived since.
    private var pingOutstanding = false

    init(phase: Phase, timeouts: Timeouts, now: Int64) {
        self.phase = phase
        self.timeouts = timeouts
        self.phaseStartedAt = now
        self.lastActivity = now
    }

    // MARK: Events

    mutating func enter(_ next: Phase, at now: Int64) {
        phase = next
        phaseStartedAt = now
    }

    /// Bytes arrived.
    mutating func received(at now: Int64) {
        lastActivity = now
        pingOutstanding = false
    }

    /// A request's first bytes were read (later calls keep the first time).
    mutating func requestStarted(at now: Int64) {
        if requestStartedAt == nil { requestStartedAt = now }
    }

    /// The request is complete (or the connection stopped reading requests).
    mutating func requestEnded() {
        requestStartedAt = nil
    }

    /// The application will answer the request later, from elsewhere.
    mutating func responseDeferred() {
        awaitingResponse = true
    }

    /// The deferred answer arrived: the keep-alive wait starts again.
    mutating func deferredResponseReleased(at now: Int64) {
        awaitingResponse = false
        lastActivity = now
    }

    mutating func closed() {
        phase = .closed
    }

    // MARK: Time

    /// What is due at `now` (the loop's sweep). Returns at most one action;
    /// a ping is counted as sent when it is returned.
    mutating func tick(at now: Int64) -> Action {
        switch phase {
        case .connecting, .tlsHandshake, .clientHandshake:
            if now - phaseStartedAt > timeouts.handshakeMillis {
                return .handshakeTimedOut(limitMillis: timeouts.handshakeMillis)
            }
        case .http:
            guard !awaitingResponse else { return .none }
            if let started = requestStartedAt {
                if let limit = timeouts.requestMillis, now - started > limit {
                    return .requestTimedOut(limitMillis: limit)
                }
            } else if let limit = timeouts.keepAliveMillis, now - lastActivity > limit {
                return .keepAliveExpired
            }
        case .webSocket:
            let silent = now - lastActivity
            if silent > timeouts.idleMillis {
                return .idleTimedOut(limitMillis: timeouts.idleMillis)
            }
            if silent > timeouts.pingIntervalMillis, !pingOutstanding {
                pingOutstanding = true
                return .sendPing
            }
        case .closing:
            if now - phaseStartedAt > timeouts.closeMillis { return .closeTimedOut }
        case .closed:
            break
        }
        return .none
    }
}

extension ConnectionStateMachine.Timeouts {
    /// A server connection's limits.
    init(server configuration: ServerConfiguration) {
        self.init(handshakeMillis: configuration.tlsHandshakeTimeoutMillis,
                  requestMillis: configuration.requestTimeoutMillis,
                  keepAliveMillis: configuration.keepAliveTimeoutMillis,
                  webSocket: configuration.webSocket)
    }

    /// A client connection's limits: the handshake may take twice the close
    /// timeout (there is no separate setting), and there is no HTTP phase.
    init(client options: WebSocketOptions) {
        self.init(handshakeMillis: options.closeTimeoutMillis * 2, requestMillis: nil, keepAliveMillis: nil,
                  webSocket: options)
    }

    private init(handshakeMillis: Int64, requestMillis: Int64?, keepAliveMillis: Int64?,
                 webSocket options: WebSocketOptions) {
        self.init(handshakeMillis: handshakeMillis, requestMillis: requestMillis, keepAliveMillis: keepAliveMillis,
                  pingIntervalMillis: options.pingIntervalMillis, idleMillis: options.idleTimeoutMillis,
                  closeMillis: options.closeTimeoutMillis)
    }
}
