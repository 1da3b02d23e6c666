import TallyConcurrency
import TallyTLS
import TallyWebSocket

/// A synchronous face over the event-loop client, for scripts, tests and
/// benchmarks: connect, send, wait for the next event.
public final class BlockingWebSocket: Sendable {
    public enum Event: Sendable {
        case message(WebSocketMessageKind, [UInt8])
        case closed(WebSocketCloseCode, String)
    }

    private let mailbox = Events()
    private let socket: LoopBound<WebSocket>
    public let loop: EventLoop
    /// The negotiated permessage-deflate parameters, if any.
    public let deflate: PerMessageDeflateParameters?

    /// Connects and waits for the handshake (or its failure).
    public init(url: String, loop: EventLoop, options: WebSocketOptions = WebSocketOptions(),
                tls: TLSContext? = nil, subprotocols: [String] = [], headers: [(String, String)] = [],
                timeoutMillis: Int = 10_000) throws(ClientError) {
        self.loop = loop
        let outcome = ConditionLock<Result<(LoopBound<WebSocket>, PerMessageDeflateParameters?), ClientError>?>(nil)
        let mailbox = self.mailbox
        WebSocketClient.connect(to: url, on: loop, options: options, tls: tls, subprotocols: subprotocols,
                                headers: headers, handler: { _ in Sink(mailbox: mailbox) }) { result in
            outcome.withLock { $0 = result.map { (LoopBound($0, on: loop), $0.deflate) } }
            outcome.signal()
        }
        switch outcome.wait(timeoutMillis: timeoutMillis, until: { $0 }) {
        case .success(let (socket, deflate)):
            self.socket = socket
            self.deflate = deflate
        case .failure(let error): throw error
        case nil: throw .handshake("no answer within \(timeoutMillis) ms")
        }
    }

    /// Sends one message (optionally fragmented).
    public func send(_ kind: WebSocketMessageKind, _ payload: [UInt8], fragmentSize: Int? = nil) {
        socket.execute { socket in
            if let fragmentSize { socket.send(kind, payload, fragmentSize: fragmentSize) }
            else { socket.send(kind, payload) }
        }
    }

    /// The next event, or nil after `timeoutMillis`.
    public func receive(timeoutMillis: Int = 10_000) -> Event? {
        mailbox.receive(timeoutMillis: timeoutMillis)
    }

    public func close(_ code: WebSocketCloseCode = .normal, reason: String = "") {
        socket.execute { $0.close(code, reason: reason) }
    }

    /// Events in arrival order, for one receiving thread.
    final class Events: Sendable {
        private let queue = ConditionLock<[Event]>([])
        func deliver(_ event: Event) {
            queue.withLock { $0.append(event) }
            queue.signal()
        }
        func receive(timeoutMillis: Int) -> Event? {
            queue.wait(timeoutMillis: timeoutMillis) { $0.isEmpty ? nil : $0.removeFirst() }
        }
    }

    /// Receives events on the loop thread and hands them to the waiting thread.
    final class Sink: WebSocketHandler {
        let mailbox: Events
        init(mailbox: Events) { self.mailbox = mailbox }
        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
            mailbox.deliver(.message(kind, payload))
        }
        func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
            mailbox.deliver(.closed(code, reason))
        }
    }
}
