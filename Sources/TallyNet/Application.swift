import Synchronization
import TallyHTTP
import TallyWebSocket

/// What the server does with one HTTP request.
public enum HTTPAction: Sendable {
    /// Answer it.
    case respond(HTTPResponse)
    /// Switch the connection to WebSocket after validating the handshake
    /// (RFC 6455 §4.2.1); an invalid handshake is answered with 400/426.
    case upgrade(WebSocketRoute)
    /// Answer later, from any thread, through the responder (for work that
    /// waits on something else, such as a storage commit). The connection
    /// holds back later pipelined requests until this one is answered.
    case deferred(@Sendable (HTTPResponder) -> Void)
}

/// Answers one deferred request. Safe to use from any thread; only the first
/// answer counts, and an answer for a connection that closed is dropped.
public final class HTTPResponder: Sendable {
    private let connection: LoopBound<Connection>
    private let request: HTTPRequest
    private let answered = Atomic<Bool>(false)

    init(connection: Connection, request: HTTPRequest) {
        self.connection = LoopBound(connection, on: connection.loop)
        self.request = request
    }

    /// Whether the connection closed before the answer: work still to be
    /// done for it can be skipped.
    public var isCancelled: Bool { cancelled.load(ordering: .relaxed) }
    private let cancelled = Atomic<Bool>(false)

    func cancel() { cancelled.store(true, ordering: .relaxed) }

    public func respond(_ response: HTTPResponse) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let request = request
        connection.execute { $0.finishDeferred(response, to: request) }
    }
}

/// A WebSocket endpoint: which subprotocols it speaks and who handles its
/// connections.
public struct WebSocketRoute: Sendable {
    /// Subprotocols in server preference order; empty when none are used.
    public var subprotocols: [String]
    /// Refuse clients that offer none of `subprotocols` (400).
    public var requiresSubprotocol: Bool
    /// Called on the connection's loop thread once the handshake succeeds.
    public var makeHandler: @Sendable (WebSocket) -> any WebSocketHandler

    public init(subprotocols: [String] = [], requiresSubprotocol: Bool = false,
                makeHandler: @escaping @Sendable (WebSocket) -> any WebSocketHandler) {
        self.subprotocols = subprotocols
        self.requiresSubprotocol = requiresSubprotocol
        self.makeHandler = makeHandler
    }
}

/// Facts about a request beyond its bytes.
public struct RequestContext: Sendable {
    public var loop: EventLoop
    public var isTLS: Bool
}

/// The server's application: routes requests. Called on the loop thread that
/// owns the connection, so it must not block.
public protocol HTTPApplication: Sendable {
    func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction
    /// Decides on a request that has a body from its header section alone,
    /// before the body is read or `100 Continue` sent: a response refuses it
    /// (the connection answers and closes without reading the body), nil
    /// reads the body and hands the whole request to `handle`.
    func screen(_ head: HTTPRequest, context: RequestContext) -> HTTPResponse?
}

extension HTTPApplication {
    public func screen(_ head: HTTPRequest, context: RequestContext) -> HTTPResponse? { nil }
}

/// Receives one WebSocket connection's events, on its loop thread.
public protocol WebSocketHandler: AnyObject {
    func webSocketDidOpen(_ socket: WebSocket)
    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8])
    /// Called once, however the connection ended; `code` is `.abnormal` when
    /// it dropped without a close handshake.
    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String)
}

extension WebSocketHandler {
    public func webSocketDidOpen(_ socket: WebSocket) {}
    public func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {}
}

/// A message framed once for many connections (RFC 6455 §5.1: server frames
/// are unmasked, so the same bytes are valid on every connection). Connections
/// whose compression state makes frames connection-specific encode `payload`
/// themselves instead.
public struct SharedFrame: Sendable {
    public let kind: WebSocketMessageKind
    public let payload: [UInt8]
    /// The complete unmasked, uncompressed frame.
    public let bytes: [UInt8]

    public init(_ kind: WebSocketMessageKind, _ payload: [UInt8]) {
        self.kind = kind
        self.payload = payload
        var encoder = WebSocketEncoder(role: .server)
        self.bytes = payload.withUnsafeBytes { encoder.message(kind, $0) }
    }
}

/// The application's face of one WebSocket connection. Use it on its loop
/// thread (`loop.execute` from others, or carry it in a `LoopBound`); debug
/// builds assert this in `send` and `close`.
public final class WebSocket {
    /// Strong while open; dropped at close so the pair does not keep itself alive.
    private var connection: Connection?
    public let loop: EventLoop
    /// The negotiated subprotocol, if any.
    public let subprotocol: String?
    /// The negotiated permessage-deflate parameters, if any.
    public let deflate: PerMessageDeflateParameters?
    public var isOpen: Bool { connection != nil }

    init(connection: Connection, loop: EventLoop, subprotocol: String?, deflate: PerMessageDeflateParameters?) {
        self.connection = connection
        self.loop = loop
        self.subprotocol = subprotocol
        self.deflate = deflate
    }

    /// Queues a message. Returns false when the connection is closing or was
    /// just closed as a slow consumer.
    @discardableResult
    public func send(_ kind: WebSocketMessageKind, _ payload: [UInt8]) -> Bool {
        assertOnLoop()
        guard let connection else { return false }
        return connection.sendMessage(kind, payload)
    }

    /// Queues a text message.
    @discardableResult
    public func send(text: String) -> Bool { send(.text, Array(text.utf8)) }

    /// Queues a frame built once for many connections.
    @discardableResult
    public func send(_ frame: SharedFrame) -> Bool {
        assertOnLoop()
        guard let connection else { return false }
        return connection.sendShared(frame)
    }

    /// Queues a message split into fragments of `fragmentSize` bytes.
    @discardableResult
    public func send(_ kind: WebSocketMessageKind, _ payload: [UInt8], fragmentSize: Int) -> Bool {
        assertOnLoop()
        guard let connection else { return false }
        return connection.sendFragmented(kind, payload, fragmentSize: fragmentSize)
    }

    /// Starts the close handshake.
    public func close(_ code: WebSocketCloseCode = .normal, reason: String = "") {
        assertOnLoop()
        connection?.startClose(code, reason: reason)
    }

    /// Debug builds only: the caller runs on this socket's loop thread.
    @inline(__always)
    private func assertOnLoop() {
        assert(loop.inEventLoop, "WebSocket used off its loop's thread (loop \(loop.id))")
    }

    /// Bytes queued and not yet written (for flow control by producers).
    public var bufferedAmount: Int { connection?.outbound.byteCount ?? 0 }

    func markClosed() { connection = nil }
}
