import Testing
@testable import TallyNet
import TallyWebSocket

/// Sends 16 KiB frames to one socket, two per loop iteration, until the
/// server refuses (`send` returns false) or `limit` bytes were queued. Two
/// frames stay under a 64 KiB bound, so the queue only grows past it when
/// the socket stops taking bytes: a consumer that does not read.
final class Flood: @unchecked Sendable {
    let socket: WebSocket
    let chunk = [UInt8](repeating: 0x5A, count: 16 * 1024)
    let limit: Int
    let refused: EventLog<Int>
    private var queued = 0

    init(socket: WebSocket, limit: Int, refused: EventLog<Int>) {
        self.socket = socket
        self.limit = limit
        self.refused = refused
    }

    /// Starts from the loop's mailbox rather than inside the handler: the
    /// mailbox runs after the handlers of an iteration and before its flush,
    /// so a step started inside a handler would run twice before one flush.
    func start() {
        socket.loop.execute { self.step() }
    }

    /// Runs on the socket's loop, once per iteration.
    private func step() {
        for _ in 0..<2 {
            guard socket.send(.binary, chunk) else {
                refused.append(queued)
                return
            }
            queued += chunk.count
            if queued >= limit {
                refused.append(-queued)  // never refused
                return
            }
        }
        socket.loop.execute { self.step() }
    }
}

@Suite struct LimitTests {
    @Test func messageOverMaxMessageSizeCloses1009() throws {
        let log = EventLog<ServerEvent>()
        let configuration = testConfiguration { $0.webSocket.maxMessageSize = 1_024 }
        try withServer(configuration, TestApp(["/ws": recordingRoute(log: log)])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            // At the limit is fine.
            client.send(.binary, patternBytes(count: 1_024))
            #expect(try client.expectMessage().payload.count == 1_024)
            client.send(.binary, patternBytes(count: 1_025))
            #expect(try client.expectClose().code == .messageTooBig)
            #expect(log.next { $0.closeCode }?.0 == .messageTooBig)
            #expect(server.metricsSnapshot()[.protocolErrors] >= 1)
        }
    }

    /// The limit applies to the whole message, not each fragment, and to
    /// the decompressed size.
    @Test(arguments: [(true, 0), (false, 100)])
    func limitCountsWholeMessages(deflate: Bool, fragmentSize: Int) throws {
        let configuration = testConfiguration { $0.webSocket.maxMessageSize = 4_096 }
        try withServer(configuration, TestApp()) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(), options: options(deflate: deflate))
            // Highly compressible: a few bytes on the wire, 10 000 after inflating.
            let payload = [UInt8](repeating: 0x61, count: 10_000)
            client.send(.text, payload, fragmentSize: fragmentSize > 0 ? fragmentSize : nil)
            #expect(try client.expectClose().code == .messageTooBig)
        }
    }

    /// A consumer that never reads is disconnected once `maxOutboundBytes`
    /// are queued for it; other clients keep being served.
    @Test func slowConsumerIsDisconnected() throws {
        let refused = EventLog<Int>()
        let flood = recordingRoute(onMessage: { socket, _, _ in
            Flood(socket: socket, limit: 64 << 20, refused: refused).start()
        })
        let configuration = testConfiguration { $0.webSocket.maxOutboundBytes = 64 * 1024 }
        try withServer(configuration, TestApp(["/flood": flood, "/ws": recordingRoute()])) { server, clients in
            // A small receive buffer, so the kernel soaks up little before the queue grows.
            let raw = try RawSocket(port: server.port, receiveBuffer: 4_096)
            defer { raw.close() }
            try raw.upgrade(path: "/flood")
            try raw.sendMessage(.text, Array("go".utf8))
            let queuedWhenRefused = try #require(refused.next(timeoutMillis: 4_000))
            #expect(queuedWhenRefused > 0, "the server never refused a send to a consumer that does not read")
            #expect(server.metricsSnapshot()[.slowConsumerDisconnects] >= 1)

            // Another client is still served.
            let other = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            other.send(.text, Array("still there?".utf8))
            #expect(try other.expectMessage().payload == Array("still there?".utf8))

            // The slow consumer, reading at last, finds whole frames, then a
            // 1008 close frame, then the end of the connection.
            var messages = 0
            var close: WebSocketEvent?
            while let event = try raw.nextEvent(timeoutMillis: eventTimeout) {
                switch event {
                case .message(.binary, let payload):
                    #expect(payload.count == 16 * 1024)
                    messages += 1
                case .close:
                    close = event
                default:
                    Issue.record("unexpected \(event)")
                }
                if close != nil { break }
            }
            guard case .close(let code, let reason)? = close else {
                Issue.record("no close frame after \(messages) messages")
                return
            }
            #expect(code == .policyViolation)
            #expect(reason.contains("slow consumer"))
            #expect(raw.waitForEOF())
        }
    }

    /// The same producer against a client that reads: never cut off.
    @Test func readingConsumerIsNotDisconnected() throws {
        let refused = EventLog<Int>()
        let total = 2 << 20
        let flood = recordingRoute(onMessage: { socket, _, _ in
            Flood(socket: socket, limit: total, refused: refused).start()
        })
        let configuration = testConfiguration { $0.webSocket.maxOutboundBytes = 64 * 1024 }
        try withServer(configuration, TestApp(["/flood": flood])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port, "/flood"), loop: clients.next(),
                                               options: options(deflate: false))
            client.send(.text, Array("go".utf8))
            for _ in 0..<(total / (16 * 1024)) {
                #expect(try client.expectMessage().payload.count == 16 * 1024)
            }
            #expect(refused.next() == -total, "a consumer that reads was refused")
            #expect(server.metricsSnapshot()[.slowConsumerDisconnects] == 0)
        }
    }

    /// One message larger than the bound is accepted when nothing else is
    /// queued, so a big message never trips the bound on its own.
    @Test func singleLargeMessageIsAllowed() throws {
        let route = recordingRoute(onMessage: { socket, _, _ in
            socket.send(.binary, patternBytes(count: 256 * 1024))
        })
        let configuration = testConfiguration { $0.webSocket.maxOutboundBytes = 64 * 1024 }
        try withServer(configuration, TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(), options: options(deflate: false))
            client.send(.text, [0x61])
            #expect(try client.expectMessage().payload.count == 256 * 1024)
            #expect(server.metricsSnapshot()[.slowConsumerDisconnects] == 0)
        }
    }

    /// Graceful shutdown: connected clients get 1001, and `shutdown`
    /// returns as soon as they finished the close handshake.
    @Test func shutdownClosesWebSocketsWith1001() throws {
        let log = EventLog<ServerEvent>()
        let configuration = testConfiguration { $0.shutdownGraceMillis = 2_000 }
        let server = try Server(configuration: configuration, application: TestApp(["/ws": recordingRoute(log: log)]))
        let clients = try EventLoopGroup(threads: 1)
        defer { clients.shutdown() }
        let sockets = try (0..<3).map { _ in try BlockingWebSocket(url: wsURL(server.port), loop: clients.next()) }
        for socket in sockets {
            socket.send(.text, [0x61])
            _ = try socket.expectMessage()
        }
        let started = Sys.monotonicMillis()
        server.shutdown()
        let elapsed = Sys.monotonicMillis() - started
        #expect(elapsed < 2_000, "shutdown took \(elapsed) ms although every client closed at once")
        for socket in sockets {
            let closed = try socket.expectClose()
            #expect(closed.code == .goingAway)
            #expect(closed.reason == "server shutting down")
        }
        var closes = 0
        while let event = log.next(timeoutMillis: 200) { if event.closeCode?.0 == .goingAway { closes += 1 } }
        #expect(closes == 3)
        server.shutdown()  // a second call is harmless
    }

    /// A peer that ignores the close frame holds shutdown up for the grace
    /// period, no longer; then it is cut off.
    @Test func shutdownGivesUpAfterTheGracePeriod() throws {
        let configuration = testConfiguration { $0.shutdownGraceMillis = 300 }
        let server = try Server(configuration: configuration, application: TestApp())
        let raw = try RawSocket(port: server.port)
        defer { raw.close() }
        try raw.upgrade()
        let started = Sys.monotonicMillis()
        server.shutdown()
        let elapsed = Sys.monotonicMillis() - started
        #expect(elapsed >= 250, "shutdown returned after \(elapsed) ms, before the grace period")
        #expect(elapsed < 2_300, "shutdown took \(elapsed) ms with a 300 ms grace period")
        guard case .close(let code, _)? = try raw.nextEvent() else {
            Issue.record("expected a close frame")
            return
        }
        #expect(code == .goingAway)
        #expect(raw.waitForEOF())
    }

    /// Shutdown lets an idle HTTP keep-alive connection go at once and
    /// stops accepting new connections.
    @Test func shutdownClosesIdleHTTPConnectionsAndStopsListening() throws {
        let server = try Server(configuration: testConfiguration(), application: TestApp())
        let port = server.port
        let raw = try RawSocket(port: port)
        defer { raw.close() }
        try raw.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try raw.readResponse().text == "hello")
        let started = Sys.monotonicMillis()
        server.shutdown()
        #expect(Sys.monotonicMillis() - started < 1_000)
        #expect(raw.waitForEOF())
        #expect(throws: (any Error).self) { _ = try RawSocket(port: port) }
    }
}
