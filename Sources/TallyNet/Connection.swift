@preconcurrency import Glibc
import CLinuxShim
import TallyHTTP
import TallyTLS
import TallyWebSocket

/// One TCP connection, server or client side, confined to its loop thread.
///
/// It moves through phases: (connecting →) (TLS handshake →) HTTP (server) or
/// client handshake → WebSocket → closing → closed. Protocol decisions live in
/// the pure codecs (`HTTPRequestParser`, `WebSocketDecoder`) and the phase
/// and its timeouts in `ConnectionStateMachine`; this class only moves
/// bytes between them and the socket, keeps the outbound queue and performs
/// what the state machine's sweep asks for. Reads go through the loop's
/// shared buffer, so an idle connection holds no buffers of its own.
final class Connection: EventSource {
    enum Role { case server, client }

    typealias Phase = ConnectionStateMachine.Phase

    let fd: Int32
    let loop: EventLoop
    let role: Role
    let options: WebSocketOptions
    /// Server-side settings and application; nil for clients.
    let server: ServerContext?
    // The members a send touches (per message, per subscriber) skip the
    // runtime exclusivity check — a thread-local access set lookup on every
    // access, a fifth of the hub's instructions per delivered push under
    // callgrind. They are touched only by this connection's loop thread and
    // never while another access to them is open (no closure given to one
    // of them reaches back into the connection).
    @exclusivity(unchecked) var tls: TLSSession?
    /// The phase and the times its timeouts are measured from.
    @exclusivity(unchecked) private(set) var state: ConnectionStateMachine
    var phase: Phase { state.phase }

    var httpParser: HTTPRequestParser?
    /// A deferred request is being answered elsewhere; later requests wait in `heldInput`.
    var awaitingResponse: Bool { state.awaitingResponse }
    var heldInput: [UInt8] = []
    static let maxHeldInput = 1 << 20
    /// The deferred request's responder, told when the connection closes so
    /// the work it asked for can be dropped.
    var pendingResponder: HTTPResponder?
    /// Not reading: an HTTP client's answers are queued past
    /// `maxQueuedHTTPBytes` and it is not reading them. Its requests wait in
    /// the socket (TCP flow control) until the queue drains.
    var readPaused = false
    /// How much an HTTP connection may have queued before its later
    /// (pipelined) requests wait: a client that sends requests and never
    /// reads the answers holds this much of the hub's memory, not more.
    static let maxQueuedHTTPBytes = 1 << 20
    var decoder: WebSocketDecoder?
    @exclusivity(unchecked) var encoder: WebSocketEncoder?
    @exclusivity(unchecked) var socket: WebSocket?
    var handler: (any WebSocketHandler)?
    var client: ClientHandshake?

    @exclusivity(unchecked) var outbound = OutboundQueue()
    @exclusivity(unchecked) private var interest: UInt32
    @exclusivity(unchecked) private var flushScheduled = false
    /// Shut the write side once the queue drains (after a final response or close frame).
    @exclusivity(unchecked) var closeAfterFlush = false
    @exclusivity(unchecked) private var writeShutDown = false
    /// Our close frame is queued: no more messages may follow it.
    @exclusivity(unchecked) var closeFrameSent = false

    static let baseEvents = EPOLLIN.rawValue | EPOLLRDHUP.rawValue

    init(fd: Int32, loop: EventLoop, role: Role, options: WebSocketOptions, server: ServerContext?, phase: Phase) {
        self.fd = fd
        self.loop = loop
        self.role = role
        self.options = options
        self.server = server
        let timeouts = server.map { ConnectionStateMachine.Timeouts(server: $0.configuration) }
            ?? ConnectionStateMachine.Timeouts(client: options)
        self.state = ConnectionStateMachine(phase: phase, timeouts: timeouts, now: loop.now)
        self.interest = Connection.baseEvents
    }

    func enter(_ next: Phase) {
        state.enter(next, at: loop.now)
    }

    /// The current request's bytes started arriving (see `ConnectionStateMachine`).
    func requestStarted() { state.requestStarted(at: loop.now) }
    func requestEnded() { state.requestEnded() }
    func responseDeferred() { state.responseDeferred() }
    func deferredResponseReleased() { state.deferredResponseReleased(at: loop.now) }

    /// Registers with the loop; `events` defaults to readability.
    func register(events: UInt32 = Connection.baseEvents) throws(SystemError) {
        interest = events
        try loop.register(self, fd: fd, events: events)
        loop.connectionCount += 1
        loop.metrics.add(.connectionsOpen)
    }

    // MARK: Events

    func handleEvents(_ events: UInt32) {
        switch phase {
        case .closed:
            return
        case .connecting:
            finishConnect()
            return
        case .tlsHandshake:
            driveTLSHandshake()
            return
        default:
            break
        }
        if readPaused {
            // Not reading, so a hang-up or error would be reported again on
            // every wait (epoll reports them whatever the interest): close.
            if events & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 { return abort() }
        } else if events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue) != 0 {
            readable()
        }
        if phase != .closed, events & EPOLLOUT.rawValue != 0 {
            flush()
        }
    }

    private func readable() {
        let buffer = loop.readBuffer
        // A few reads per wake-up keep one busy connection from starving the others.
        for _ in 0..<8 {
            guard phase != .closed, !readPaused else { return }
            let n: Int
            if let tls {
                switch tls.read(into: buffer) {
                case .done(let count): n = count
                case .wantRead:
                    // A TLS write that waited for the peer (key update) may proceed now.
                    if !outbound.isEmpty { scheduleFlush() }
                    return
                case .wantWrite:
                    setWriteInterest(true)
                    return
                case .closed: n = 0
                case .failed(let message):
                    server?.configuration.logger.debug("tls.read_failed", ["error": message])
                    abort()
                    return
                }
            } else {
                do {
                    switch try Sys.read(fd, buffer) {
                    case .processed(let count): n = count
                    case .wouldBlock: return
                    }
                } catch {
                    abort()
                    return
                }
            }
            if n == 0 {
                peerClosed()
                return
            }
            loop.metrics.add(.bytesIn, n)
            state.received(at: loop.now)
            process(UnsafeRawBufferPointer(rebasing: buffer[..<n]))
            if n < buffer.count, !(tls?.hasBufferedPlaintext ?? false) { return }
        }
        // Out of turns with decrypted bytes still inside OpenSSL: epoll will
        // not report them (the socket may be drained), so come back soon.
        if let tls, tls.hasBufferedPlaintext, phase != .closed {
            LoopBound(self, on: loop).execute { $0.readable() }
        }
    }

    private func process(_ bytes: UnsafeRawBufferPointer) {
        switch phase {
        case .http:
            processHTTP(bytes)
        case .clientHandshake:
            processClientHandshake(bytes)
        case .webSocket:
            processWebSocket(bytes)
        case .closing:
            // Still looking for the peer's close frame; anything else is discarded.
            if decoder != nil { processWebSocket(bytes) }
        case .connecting, .tlsHandshake, .closed:
            break
        }
    }

    // MARK: TLS

    func driveTLSHandshake() {
        guard let tls else { return }
        switch tls.handshake() {
        case .done:
            if role == .server {
                enter(.http)
                httpParser = HTTPRequestParser(limits: server?.configuration.httpLimits ?? HTTPLimits(), reportsHeads: true)
                setWriteInterest(false)
                // Bytes of the first request may already sit decrypted inside OpenSSL.
                readable()
            } else {
                sendClientHandshake()
            }
        case .wantRead:
            setWriteInterest(false)
        case .wantWrite:
            setWriteInterest(true)
        case .closed:
            abort()
        case .failed(let message):
            loop.metrics.add(.tlsHandshakeFailures)
            server?.configuration.logger.info("tls.handshake_failed", ["error": message])
            client?.fail(ClientError.tls(message))
            abort()
        }
    }

    // MARK: Writing

    /// Queues bytes and arranges a flush at the end of this loop iteration.
    /// Returns false (and closes the connection as a slow consumer) when the
    /// bound in `WebSocketOptions.maxOutboundBytes` would be passed.
    @discardableResult
    func enqueue(_ bytes: [UInt8]) -> Bool {
        guard phase != .closed else { return false }
        if phase == .webSocket, outbound.byteCount > 0,
           outbound.byteCount + bytes.count > options.maxOutboundBytes {
            slowConsumer()
            return false
        }
        outbound.append(bytes)
        scheduleFlush()
        return true
    }

    func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        loop.requestFlush(self)
    }

    /// Writes as much of the queue as the socket takes: one `send` for one
    /// chunk, one `writev` for several.
    func flush() {
        flushScheduled = false
        guard phase != .closed, phase != .connecting, phase != .tlsHandshake else { return }
        while !outbound.isEmpty {
            let result: IOResult
            do {
                result = try writeSome()
            } catch {
                abort()
                return
            }
            switch result {
            case .processed(let n):
                outbound.consume(n)
                loop.metrics.add(.bytesOut, n)
            case .wouldBlock:
                setWriteInterest(true)
                return
            }
        }
        setWriteInterest(false)
        if closeAfterFlush, !writeShutDown { shutDownWrite() }
        if readPaused { resumeReading() }
    }

    private func writeSome() throws(SystemError) -> IOResult {
        if let tls {
            let outcome = outbound.withFirstChunk { tls.write($0) }
            switch outcome {
            case .done(let n): return .processed(n)
            case .wantRead, .wantWrite: return .wouldBlock
            case .closed, .failed: throw SystemError("SSL_write", errno: EPIPE)
            }
        }
        let fd = self.fd
        let outcome: Result<IOResult, SystemError>
        if outbound.chunkCount == 1 {
            outcome = outbound.withFirstChunk { bytes in Result { () throws(SystemError) in try Sys.write(fd, bytes) } }
        } else {
            let iov = loop.iovecs
            outcome = outbound.withIOVecs(iov, max: EventLoop.maxIOVecs) { count in
                Result { () throws(SystemError) in try Sys.writev(fd, iov, count) }
            }
        }
        return try outcome.get()
    }

    func setWriteInterest(_ on: Bool) {
        let read = readPaused ? 0 : Connection.baseEvents
        let wanted = on ? read | EPOLLOUT.rawValue : read
        guard wanted != interest, phase != .closed else { return }
        interest = wanted
        loop.modify(fd: fd, events: wanted)
    }

    /// Stops reading until the outbound queue drains (see `readPaused`).
    func pauseReading() {
        guard !readPaused else { return }
        readPaused = true
        loop.metrics.add(.httpReadPauses)
        setWriteInterest(!outbound.isEmpty)
    }

    /// The queue drained: read again, starting with what was held back.
    /// Done as a task of its own rather than inside `flush`, which the
    /// requests it parses would enqueue into.
    private func resumeReading() {
        readPaused = false
        setWriteInterest(false)
        guard !heldInput.isEmpty else { return }
        LoopBound(self, on: loop).execute { $0.processHeldInput() }
    }

    /// Half-closes after the last bytes went out, then waits for the peer's
    /// EOF. Closing outright could reset the connection while unread input is
    /// pending, and a reset can destroy the close frame or error response
    /// before the peer reads it.
    private func shutDownWrite() {
        writeShutDown = true
        tls?.shutdown()
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        if phase != .closing { enter(.closing) }
        decoder = nil
    }

    // MARK: Closing

    /// The peer sent EOF.
    private func peerClosed() {
        if let socket, socket.isOpen {
            finishWebSocket(.abnormal, reason: "connection closed without a close frame")
        }
        client?.fail(ClientError.handshake("the server closed the connection during the handshake"))
        closeNow()
    }

    /// A socket error: close at once.
    func abort() {
        if let socket, socket.isOpen {
            finishWebSocket(.abnormal, reason: "connection lost")
        }
        client?.fail(ClientError.handshake("connection lost"))
        closeNow()
    }

    /// Releases everything. Safe to call twice.
    func closeNow() {
        guard phase != .closed else { return }
        state.closed()
        loop.deregister(fd: fd)
        tls = nil
        Sys.close(fd)
        outbound = OutboundQueue()
        pendingResponder?.cancel()
        pendingResponder = nil
        httpParser = nil
        decoder = nil
        encoder = nil
        handler = nil
        socket = nil
        client = nil
        loop.connectionCount -= 1
        loop.metrics.add(.connectionsOpen, -1)
    }

    // MARK: Timeouts

    /// Called about once a second (more often with short timeouts) by the
    /// loop's sweep, with the loop's time: does what the state machine says
    /// is due (pings, idle, request and handshake timeouts).
    func sweep(now: Int64) {
        switch state.tick(at: now) {
        case .none:
            break
        case .handshakeTimedOut(let limit):
            client?.fail(ClientError.handshake("timed out after \(limit) ms"))
            loop.metrics.add(.idleTimeouts)
            closeNow()
        case .requestTimedOut(let limit):
            loop.metrics.add(.idleTimeouts)
            respondAndClose(.error(.requestTimeout, code: "request_timeout",
                                   message: "the request was not complete within \(limit) ms"))
        case .keepAliveExpired:
            closeNow()
        case .idleTimedOut(let limit):
            loop.metrics.add(.idleTimeouts)
            startClose(.goingAway, reason: "idle timeout: nothing received for \(limit) ms")
        case .sendPing:
            if let ping = [UInt8]().withUnsafeBytes({ encoder?.ping($0) }) { enqueue(ping) }
        case .closeTimedOut:
            closeNow()
        }
    }
}

/// What a server connection needs from its server: frozen settings and the application.
final class ServerContext: Sendable {
    let configuration: ServerConfiguration
    let application: any HTTPApplication
    init(configuration: ServerConfiguration, application: any HTTPApplication) {
        self.configuration = configuration
        self.application = application
    }
}
