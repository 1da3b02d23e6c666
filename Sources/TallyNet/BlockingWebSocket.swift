import Dispatch
import Synchronization

import TallyTLS
import TallyWebSocket

/// A synchronous face over the event-loop client, for scripts, tests and
/// benchmarks: connect, send, wait for the next event.
public final class BlockingWebSocket: Sendable {
    public enum Event: Sendable {
        case message(WebSocketMessageKind, [UInt8])
        case closed(WebSocketCloseCode, String)
    }

    private let mailbox = Mailbox()
    private let socket: SocketRef
    public let loop: EventLoop

    /// Connects and waits for the handshake (or its failure).
    public init(url: String, loop: EventLoop, options: WebSocketOptions = WebSocketOptions(),
                tls: TLSContext? = nil, subprotocols: [String] = [], headers: [(String, String)] = [],
                timeoutMillis: Int = 10_000) throws(ClientError) {
        self.loop = loop
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<Result<SocketRef, ClientError>?>(nil)
        let mailbox = self.mailbox
        WebSocketClient.connect(to: url, on: loop, options: options, tls: tls, subprotocols: subprotocols,
                                headers: headers, handler: { _ in Sink(mailbox: mailbox) }) { result in
            outcome.withLock { $0 = result.map { SocketRef(socket: $0) } }
            done.signal()
        }
        if done.wait(timeout: .now() + .milliseconds(timeoutMillis)) == .timedOut {
            throw .handshake("no answer within \(timeoutMillis) ms")
        }
        switch outcome.withLock({ $0 }) {
        case .success(let ref): socket = ref
        case .failure(let error): throw error
        case nil: throw .handshake("no answer")
        }
    }

    /// Sends one message (optionally fragmented).
    public func send(_ kind: WebSocketMessageKind, _ payload: [UInt8], fragmentSize: Int? = nil) {
        let ref = socket
        loop.execute {
            if let fragmentSize { ref.socket.send(kind, payload, fragmentSize: fragmentSize) }
            else { ref.socket.send(kind, payload) }
        }
    }

    /// The negotiated permessage-deflate parameters, if any.
    public var deflate: PerMessageDeflateParameters? { socket.deflate }

    /// The next event, or nil after `timeoutMillis`.
    public func receive(timeoutMillis: Int = 10_000) -> Event? {
        mailbox.receive(timeoutMillis: timeoutMillis)
    }

    public func close(_ code: WebSocketCloseCode = .normal, reason: String = "") {
        let ref = socket
        loop.execute { ref.socket.close(code, reason: reason) }
    }

    /// The loop-confined socket, carried across threads but only touched on its loop.
    struct SocketRef: @unchecked Sendable {
        let socket: WebSocket
        let deflate: PerMessageDeflateParameters?
        init(socket: WebSocket) { self.socket = socket; self.deflate = socket.deflate }
    }

    final class Mailbox: Sendable {
        private let events = Locked<[Event]>([])
        private let arrived = DispatchSemaphore(value: 0)
        func deliver(_ event: Event) {
            events.withLock { $0.append(event) }
            arrived.signal()
        }
        func receive(timeoutMillis: Int) -> Event? {
            if arrived.wait(timeout: .now() + .milliseconds(timeoutMillis)) == .timedOut { return nil }
            return events.withLock { $0.removeFirst() }
        }
    }

    /// Receives events on the loop thread and hands them to the waiting thread.
    final class Sink: WebSocketHandler {
        let mailbox: Mailbox
        init(mailbox: Mailbox) { self.mailbox = mailbox }
        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
            mailbox.deliver(.message(kind, payload))
        }
        func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
            mailbox.deliver(.closed(code, reason))
        }
    }
}
