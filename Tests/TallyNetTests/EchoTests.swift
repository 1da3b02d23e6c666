import Testing
import TallyHTTP
@testable import TallyNet
import TallyServer
import TallyWebSocket

/// Sizes around every frame-length encoding boundary (RFC 6455 §5.2: 7-bit,
/// 16-bit and 64-bit lengths), the read buffer (64 KiB) and 1 MiB.
let echoSizes = [0, 1, 125, 126, 127, 1_000, 65_535, 65_536, 65_537, 200_000, 1 << 20]

/// Sends each size as text and binary and expects it back unchanged.
func roundTrip(_ client: BlockingWebSocket, sizes: [Int] = echoSizes, fragmentSize: Int? = nil) throws {
    for size in sizes {
        for kind in [WebSocketMessageKind.text, .binary] {
            let payload = kind == .text ? textBytes(count: size) : patternBytes(count: size, seed: UInt32(size + 1))
            client.send(kind, payload, fragmentSize: fragmentSize)
            let reply = try client.expectMessage()
            #expect(reply.kind == kind, "size \(size)")
            #expect(reply.payload.count == size, "size \(size)")
            #expect(reply.payload == payload, "size \(size) \(kind) came back changed")
        }
    }
}

@Suite struct EchoTests {
    /// Compression offered by both sides is negotiated, and every size
    /// round-trips through the hub's /echo.
    @Test(arguments: [true, false])
    func echoThroughTheHub(deflate: Bool) throws {
        try withHub({ $0.server.webSocket.deflate.enabled = deflate }) { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next(),
                                               options: options(deflate: deflate))
            #expect((client.deflate != nil) == deflate)
            try roundTrip(client)
            client.close()
            #expect(try client.expectClose().code == .normal)
        }
    }

    /// Either side refusing compression means none is used.
    @Test(arguments: [(true, true), (true, false), (false, true), (false, false)])
    func compressionNegotiation(client clientDeflate: Bool, server serverDeflate: Bool) throws {
        let log = EventLog<ServerEvent>()
        let configuration = testConfiguration { $0.webSocket.deflate.enabled = serverDeflate }
        try withServer(configuration, TestApp(["/ws": recordingRoute(log: log)])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(),
                                               options: options(deflate: clientDeflate))
            let expected = clientDeflate && serverDeflate
            #expect((client.deflate != nil) == expected)
            let opened = try #require(log.next { $0.opened })
            #expect(opened.deflate == expected, "the server side disagrees about compression")
            // Compressible text, big enough to be compressed when negotiated.
            try roundTrip(client, sizes: [100, 10_000])
        }
    }

    @Test func negotiatedParametersAreTheDefaults() throws {
        try withHub { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next())
            let deflate = try #require(client.deflate)
            #expect(deflate.serverMaxWindowBits == 15)
            #expect(deflate.clientMaxWindowBits == 15)
        }
    }

    /// Many messages in a row over one compressed connection exercise the
    /// context takeover in both directions.
    @Test func manyCompressedMessagesInARow() throws {
        try withHub { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next())
            #expect(client.deflate != nil)
            let messages = (0..<200).map { Array("message \($0): the same words again and again \($0 * 7)".utf8) }
            for message in messages { client.send(.text, message) }
            for message in messages {
                #expect(try client.expectMessage().payload == message)
            }
        }
    }

    /// Client frames split into continuation frames reassemble on the server.
    @Test(arguments: [true, false])
    func fragmentedSendsFromTheClient(deflate: Bool) throws {
        try withHub { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next(),
                                               options: options(deflate: deflate))
            try roundTrip(client, sizes: [1, 10, 999, 1_000, 1_001, 70_000], fragmentSize: 1_000)
            try roundTrip(client, sizes: [0, 5, 300], fragmentSize: 1)
        }
    }

    /// Server frames split into continuation frames reassemble in our client.
    @Test(arguments: [true, false])
    func fragmentedSendsFromTheServer(deflate: Bool) throws {
        let route = recordingRoute(onMessage: { socket, kind, payload in socket.send(kind, payload, fragmentSize: 100) })
        let configuration = testConfiguration { $0.webSocket.deflate.enabled = deflate }
        try withServer(configuration, TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            try roundTrip(client, sizes: [0, 99, 100, 101, 5_000, 100_000])
        }
    }

    /// Several messages sent back to back arrive in order (they may share one
    /// TCP segment and one vectored write).
    @Test func messagesKeepTheirOrder() throws {
        try withHub { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next(),
                                               options: options(deflate: false))
            for i in 0..<500 { client.send(.binary, [UInt8(i & 0xFF), UInt8(i >> 8)]) }
            for i in 0..<500 {
                #expect(try client.expectMessage().payload == [UInt8(i & 0xFF), UInt8(i >> 8)])
            }
        }
    }

    /// Several clients on one loop and on the server's two loops at once.
    @Test func concurrentClients() throws {
        try withHub { hub, clients in
            let sockets = try (0..<8).map { i in
                try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next(),
                                      options: options(deflate: i % 2 == 0))
            }
            for (i, socket) in sockets.enumerated() { socket.send(.text, Array("client \(i)".utf8)) }
            for (i, socket) in sockets.enumerated() {
                #expect(try socket.expectMessage().payload == Array("client \(i)".utf8))
            }
        }
    }

    /// A raw client may send its first frame in the same segment as the
    /// handshake; the server must not lose it.
    @Test func frameRightBehindTheHandshake() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            var encoder = WebSocketEncoder(role: .client)
            let frame = Array("early".utf8).withUnsafeBytes { encoder.message(.text, $0) }
            let request = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            try raw.send(Array(request.utf8) + frame)
            let response = try raw.readResponse()
            #expect(response.status == 101)
            #expect(try raw.nextEvent() == .message(.text, Array("early".utf8)))
        }
    }
}
