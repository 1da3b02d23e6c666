import Dispatch
import Testing
import TallyTestSupport
import TallyHTTP
@testable import TallyNet
import TallyServer
import TallyWebSocket

/// The error a connect attempt failed with, or a failure when it succeeded.
func connectError(_ connect: () throws(ClientError) -> BlockingWebSocket) throws -> ClientError {
    do {
        let socket = try connect()
        socket.close()
        throw TestFailure("the connection succeeded")
    } catch let error as ClientError {
        return error
    }
}

@Suite struct HandshakeTests {
    @Test func subprotocolOfferedIsChosen() throws {
        let log = EventLog<ServerEvent>()
        let route = recordingRoute(log: log, subprotocols: ["tally.v1"])
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let chosen = try negotiate(url: wsURL(server.port), loop: clients.next(),
                                       subprotocols: ["other", "tally.v1"]).get()
            #expect(chosen == "tally.v1")
            #expect(log.next { $0.opened }?.subprotocol == "tally.v1")
        }
    }

    /// The server's preference order wins over the client's.
    @Test func serverPreferenceOrderWins() throws {
        let route = recordingRoute(subprotocols: ["tally.v2", "tally.v1"])
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let chosen = try negotiate(url: wsURL(server.port), loop: clients.next(),
                                       subprotocols: ["tally.v1", "tally.v2"]).get()
            #expect(chosen == "tally.v2")
        }
    }

    @Test func noCommonSubprotocolIsAllowedWhenNotRequired() throws {
        let route = recordingRoute(subprotocols: ["tally.v1"])
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let unknown = try negotiate(url: wsURL(server.port), loop: clients.next(), subprotocols: ["x"]).get()
            #expect(unknown == nil)
            let none = try negotiate(url: wsURL(server.port), loop: clients.next(), subprotocols: []).get()
            #expect(none == nil)
        }
    }

    @Test func requiredSubprotocolMissingFailsWith400() throws {
        let log = EventLog<ServerEvent>()
        let route = recordingRoute(log: log, subprotocols: ["tally.v1"], requiresSubprotocol: true)
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let error = try connectError { () throws(ClientError) in
                try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            }
            guard case .handshake(let message) = error else {
                Issue.record("expected a handshake error, got \(error)")
                return
            }
            #expect(message.contains("400"), "\(message)")
            // Offering it works.
            let ok = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(), subprotocols: ["tally.v1"])
            #expect(log.next { $0.opened }?.subprotocol == "tally.v1")
            ok.close()
        }
    }

    /// The raw refusal is a JSON 400 naming the subprotocols to offer.
    @Test func upgradeDuringShutdownIsRefusedWith503() throws {
        try withServer(testConfiguration(threads: 1), TestApp(["/ws": recordingRoute()])) { server, clients in
            // The loop is draining: a handshake that completes now must not
            // open a WebSocket that would only be dropped without a close frame.
            let marked = DispatchSemaphore(value: 0)
            let loop = server.group.loops[0]
            loop.execute { loop.isShuttingDown = true; marked.signal() }
            #expect(marked.wait(timeout: .now() + .seconds(5)) == .success)
            let error = try connectError { () throws(ClientError) in
                try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            }
            guard case .handshake(let message) = error else {
                Issue.record("expected a handshake error, got \(error)")
                return
            }
            #expect(message.contains("503"), "\(message)")
        }
    }

    @Test func requiredSubprotocolRefusalBody() throws {
        let route = recordingRoute(subprotocols: ["tally.v1"], requiresSubprotocol: true)
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, _ in
            let second = try RawSocket(port: server.port)
            defer { second.close() }
            try second.send("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            let response = try second.readResponse()
            #expect(response.status == 400)
            #expect(response.head.headers["Content-Type"] == "application/json")
            #expect(response.text.contains("unsupported_subprotocol"))
            #expect(response.text.contains("tally.v1"))
            #expect(second.waitForEOF(), "the server keeps a refused handshake's connection open")
        }
    }

    @Test func connectingToAMissingPathFailsClearly() throws {
        try withHub { hub, clients in
            let error = try connectError { () throws(ClientError) in
                try BlockingWebSocket(url: wsURL(hub.port, "/nope"), loop: clients.next())
            }
            guard case .handshake(let message) = error else {
                Issue.record("expected a handshake error, got \(error)")
                return
            }
            #expect(message.contains("404"), "\(message)")
            #expect(error.description.contains("handshake"))
        }
    }

    @Test func connectingToAClosedPortFails() throws {
        // Bind a server, note its port, shut it down: nothing listens there now.
        let server = try Server(configuration: testConfiguration(threads: 1), application: TestApp())
        let port = server.port
        server.shutdown()
        let clients = try EventLoopGroup(threads: 1)
        defer { clients.shutdown() }
        let error = try connectError { () throws(ClientError) in
            try BlockingWebSocket(url: wsURL(port), loop: clients.next())
        }
        switch error {
        case .connect(let message): #expect(message.contains("refused"), "\(message)")
        default: Issue.record("expected a connect error, got \(error)")
        }
    }

    @Test func invalidURLFailsBeforeConnecting() throws {
        let clients = try EventLoopGroup(threads: 1)
        defer { clients.shutdown() }
        let error = try connectError { () throws(ClientError) in
            try BlockingWebSocket(url: "ftp://127.0.0.1/", loop: clients.next())
        }
        guard case .invalidURL = error else {
            Issue.record("expected invalidURL, got \(error)")
            return
        }
    }

    /// The client's close handshake: 1000 reported on both sides.
    @Test func clientInitiatedCloseReports1000OnBothSides() throws {
        let log = EventLog<ServerEvent>()
        try withServer(testConfiguration(), TestApp(["/ws": recordingRoute(log: log)])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            client.send(.text, Array("hi".utf8))
            #expect(try client.expectMessage().payload == Array("hi".utf8))
            client.close(.normal, reason: "done")
            #expect(try client.expectClose().code == .normal)
            let serverSide = try #require(log.next { $0.closeCode })
            #expect(serverSide.0 == .normal)
            #expect(serverSide.1 == "done")
            // The connection goes away on the server once the handshake is over.
            #expect(eventually { server.metricsSnapshot()[.connectionsOpen] == 0 })
            #expect(server.metricsSnapshot()[.webSocketsOpen] == 0)
        }
    }

    /// The close handshake seen by a raw client: the server echoes the code
    /// and then closes TCP.
    @Test func serverEchoesTheCloseFrameAndCloses() throws {
        let log = EventLog<ServerEvent>()
        try withServer(testConfiguration(), TestApp(["/ws": recordingRoute(log: log)])) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.upgrade()
            try raw.sendClose(.normal)
            #expect(try raw.nextEvent() == .close(.normal, reason: ""))
            #expect(raw.waitForEOF())
            #expect(log.next { $0.closeCode }?.0 == .normal)
        }
    }

    /// The handler closes: the client sees that code and reason.
    @Test func serverInitiatedCloseReachesTheClient() throws {
        let log = EventLog<ServerEvent>()
        let route = recordingRoute(log: log, onMessage: { socket, _, payload in
            if payload == Array("leave".utf8) { socket.close(.goingAway, reason: "see you") }
        })
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            client.send(.text, Array("leave".utf8))
            let closed = try client.expectClose()
            #expect(closed.code == .goingAway)
            #expect(closed.reason == "see you")
            #expect(log.next { $0.closeCode }?.0 == .goingAway)
            #expect(eventually { server.metricsSnapshot()[.connectionsOpen] == 0 })
        }
    }

    /// Messages sent after close are refused, and the handler hears of the
    /// close exactly once.
    @Test func sendAfterCloseIsRefused() throws {
        let results = EventLog<Bool>()
        let log = EventLog<ServerEvent>()
        let route = recordingRoute(log: log, onMessage: { socket, _, _ in
            socket.close(.normal, reason: "")
            results.append(socket.send(text: "too late"))
            results.append(socket.isOpen)
        })
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            client.send(.text, [0x61])
            #expect(results.next() == false)
            #expect(results.next() == false)
            #expect(try client.expectClose().code == .normal)
            #expect(client.receive(timeoutMillis: 100) == nil, "an event after the close")
            var closes = 0
            while let event = log.next(timeoutMillis: 100) { if event.closeCode != nil { closes += 1 } }
            #expect(closes == 1)
        }
    }

    /// A client that drops TCP without a close frame is reported as 1006.
    @Test func droppedConnectionIsAbnormal() throws {
        let log = EventLog<ServerEvent>()
        try withServer(testConfiguration(), TestApp(["/ws": recordingRoute(log: log)])) { server, _ in
            let raw = try RawSocket(port: server.port)
            try raw.upgrade()
            _ = log.next { $0.opened }
            raw.close()
            #expect(log.next { $0.closeCode }?.0 == .abnormal)
            #expect(eventually { server.metricsSnapshot()[.connectionsOpen] == 0 })
        }
    }

    /// A handler that greets in `webSocketDidOpen`: the greeting follows the
    /// 101 (often in the same segment) and must not be lost by the client.
    @Test(arguments: [false, true])
    func greetingSentOnOpenArrives(tls: Bool) throws {
        let fixture = tls ? try TLSFixture() : nil
        let route = recordingRoute(onOpen: { socket in
            socket.send(text: "welcome")
            socket.send(.binary, patternBytes(count: 100_000))
        })
        let configuration = testConfiguration { $0.tls = fixture?.server }
        try withServer(configuration, TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port, secure: tls), loop: clients.next(),
                                               tls: fixture?.client)
            let greeting = try client.expectMessage()
            #expect(greeting.kind == .text)
            #expect(greeting.payload == Array("welcome".utf8))
            #expect(try client.expectMessage().payload == patternBytes(count: 100_000))
        }
    }

    /// Browsers send `Connection: keep-alive, Upgrade` (Firefox) and mixed case.
    @Test func connectionHeaderWithSeveralTokens() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.status == 101)
            #expect(response.head.headers["Sec-WebSocket-Accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
            #expect(response.head.headers["Sec-WebSocket-Extensions"] == nil, "compression not offered, yet accepted")
        }
    }

    /// RFC 6455 §5.5.2–3: a ping is answered with a pong carrying its payload.
    @Test func pingIsAnsweredWithPong() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.upgrade()
            // A masked ping "abc": FIN|ping, MASK|3, key 0, payload.
            try raw.send([0x89, 0x83, 0, 0, 0, 0, 0x61, 0x62, 0x63])
            #expect(try raw.nextEvent() == .pong(Array("abc".utf8)))
            // Messages still flow afterwards.
            try raw.sendMessage(.text, Array("after".utf8))
            #expect(try raw.nextEvent() == .message(.text, Array("after".utf8)))
        }
    }

    /// Text that is not UTF-8 closes with 1007 (RFC 6455 §8.1).
    @Test func invalidUTF8TextCloses1007() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.upgrade()
            try raw.sendMessage(.text, [0x61, 0xC3, 0x28])
            guard case .close(let code, _)? = try raw.nextEvent() else {
                Issue.record("expected a close frame")
                return
            }
            #expect(code == .invalidPayload)
        }
    }

    /// Our client enforces its own `maxMessageSize` on what the server sends.
    @Test func clientRefusesMessagesOverItsLimit() throws {
        let log = EventLog<ServerEvent>()
        let route = recordingRoute(log: log, onMessage: { socket, _, _ in socket.send(.binary, patternBytes(count: 5_000)) })
        try withServer(testConfiguration(), TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(),
                                               options: options { $0.maxMessageSize = 4_096 })
            client.send(.text, [0x61])
            #expect(try client.expectClose().code == .messageTooBig)
            #expect(log.next { $0.closeCode }?.0 == .messageTooBig)
        }
    }

    /// `bufferedAmount` shows bytes queued and not yet written.
    @Test func bufferedAmountCountsQueuedBytes() throws {
        let amounts = EventLog<Int>()
        let route = recordingRoute(onMessage: { socket, _, _ in
            amounts.append(socket.bufferedAmount)
            socket.send(.binary, [UInt8](repeating: 1, count: 1_000))
            amounts.append(socket.bufferedAmount)  // queued until the end of this loop iteration
        })
        let configuration = testConfiguration { $0.webSocket.deflate.enabled = false }
        try withServer(configuration, TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            client.send(.text, [0x61])
            #expect(try client.expectMessage().payload.count == 1_000)
            #expect(amounts.next() == 0)
            #expect(amounts.next() == 1_004)  // 2-byte header + 2-byte length + payload
        }
    }

    /// An unmasked client frame is a protocol error (RFC 6455 §5.1): 1002.
    @Test func unmaskedClientFrameIsAProtocolError() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.upgrade()
            try raw.send([0x81, 0x02, 0x68, 0x69])  // "hi", FIN text, no mask
            guard case .close(let code, _)? = try raw.nextEvent() else {
                Issue.record("expected a close frame")
                return
            }
            #expect(code == .protocolError)
            #expect(raw.waitForEOF())
            #expect(eventually { server.metricsSnapshot()[.protocolErrors] >= 1 })
        }
    }
}

extension BlockingWebSocket.Event: Equatable {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case let (.message(k1, p1), .message(k2, p2)): k1 == k2 && p1 == p2
        case let (.closed(c1, r1), .closed(c2, r2)): c1 == c2 && r1 == r2
        default: false
        }
    }
}
