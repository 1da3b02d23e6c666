import Testing
import TallyConcurrency
@testable import TallyNet
import TallyWebSocket

/// Open sockets by identity, registered and removed on their loop threads;
/// a broadcast hands each loop its own sockets through `loop.execute`.
final class SocketRegistry: Sendable {
    private let sockets = LockedValueBox<[ObjectIdentifier: Unchecked<WebSocket>]>([:])

    func add(_ socket: WebSocket) {
        sockets.withLock { $0[ObjectIdentifier(socket)] = Unchecked(socket) }
    }

    func remove(_ socket: WebSocket) {
        _ = sockets.withLock { $0.removeValue(forKey: ObjectIdentifier(socket)) }
    }

    var count: Int { sockets.withLock { $0.count } }

    /// The ids of the loops the registered sockets live on.
    var loopIDs: Set<Int> { sockets.withLock { Set($0.values.map { $0.value.loop.id }) } }

    /// Sends `frame` to every socket, each on its own loop; `sent` counts
    /// the sends that were accepted.
    func broadcast(_ frame: SharedFrame, sent: Counter? = nil, done: (@Sendable () -> Void)? = nil) {
        let byLoop = sockets.withLock { sockets in
            Dictionary(grouping: sockets.values, by: { $0.value.loop.id })
        }
        for (_, members) in byLoop {
            let loop = members[0].value.loop
            let batch = Unchecked(members)
            loop.execute {
                for member in batch.value where member.value.send(frame) {
                    sent?.add()
                }
                done?()
            }
        }
    }
}

@Suite struct FanOutTests {
    static func registryRoute(_ registry: SocketRegistry) -> WebSocketRoute {
        recordingRoute(onOpen: { registry.add($0) }, onClose: { registry.remove($0) }, onMessage: { _, _, _ in })
    }

    /// One frame, 50 clients over the server's two loops, half of them with
    /// compression (which re-encodes per connection): everyone gets it.
    @Test func sharedFrameReachesEveryClient() throws {
        let registry = SocketRegistry()
        try withServer(testConfiguration(threads: 2), TestApp(["/ws": Self.registryRoute(registry)]),
                       clientThreads: 2) { server, clients in
            let count = 50
            let sockets = try (0..<count).map { i in
                try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(), options: options(deflate: i % 2 == 0))
            }
            #expect(eventually { registry.count == count })
            let payload = textBytes(count: 1_000)  // above the compression threshold
            let frame = SharedFrame(.text, payload)
            let accepted = Counter()
            registry.broadcast(frame, sent: accepted)
            for (i, socket) in sockets.enumerated() {
                let message = try socket.expectMessage()
                #expect(message.kind == .text, "client \(i)")
                #expect(message.payload == payload, "client \(i)")
            }
            #expect(accepted.value == count)
            #expect(server.metricsSnapshot()[.messagesOut] >= count)

            // A second, binary broadcast and a large one keep working over the same contexts.
            let second = SharedFrame(.binary, patternBytes(count: 200_000))
            registry.broadcast(second)
            for socket in sockets {
                #expect(try socket.expectMessage().payload == second.payload)
            }
        }
    }

    /// The shared frame is the wire image: a connection without compression
    /// receives exactly `frame.bytes`, one copy per broadcast.
    @Test func uncompressedConnectionsGetTheFrameBytesUnchanged() throws {
        let registry = SocketRegistry()
        try withServer(testConfiguration(threads: 2), TestApp(["/ws": Self.registryRoute(registry)])) { server, _ in
            let raws = try (0..<4).map { _ in try RawSocket(port: server.port) }
            defer { raws.forEach { $0.close() } }
            for raw in raws { try raw.upgrade() }  // no extension offered
            #expect(eventually { registry.count == raws.count })
            for size in [0, 100, 126, 70_000] {
                let frame = SharedFrame(.binary, patternBytes(count: size))
                registry.broadcast(frame)
                for raw in raws {
                    let received = try raw.read(count: frame.bytes.count)
                    #expect(received == frame.bytes, "size \(size)")
                }
            }
            for raw in raws { #expect(raw.takeBuffered().isEmpty) }
        }
    }

    /// A connection that negotiated permessage-deflate still takes the shared
    /// uncompressed frame below the compression threshold (RSV1 clear), and a
    /// compressed frame of its own (RSV1 set) above it.
    @Test func compressingConnectionsShareSmallFrames() throws {
        let registry = SocketRegistry()
        try withServer(testConfiguration(threads: 1), TestApp(["/ws": Self.registryRoute(registry)])) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            let response = try raw.upgrade(headers: ["Sec-WebSocket-Extensions: permessage-deflate"])
            #expect(response.status == 101)
            #expect(eventually { registry.count == 1 })
            let small = SharedFrame(.text, textBytes(count: 100))
            registry.broadcast(small)
            #expect(try raw.read(count: small.bytes.count) == small.bytes)
            let large = SharedFrame(.text, textBytes(count: 4_000))
            registry.broadcast(large)
            let header = try raw.read(count: 2)
            #expect(header[0] == 0xC1, "FIN + RSV1 + text: compressed for this connection")
        }
    }

    @Test func sharedFrameHeaderIsAnUnmaskedFinalFrame() {
        let text = SharedFrame(.text, Array("hi".utf8))
        #expect(text.bytes == [0x81, 0x02, 0x68, 0x69])
        let empty = SharedFrame(.binary, [])
        #expect(empty.bytes == [0x82, 0x00])
        let medium = SharedFrame(.binary, [UInt8](repeating: 0, count: 300))
        #expect(Array(medium.bytes.prefix(4)) == [0x82, 126, 0x01, 0x2C])
        #expect(medium.bytes.count == 4 + 300)
    }

    /// A broadcast skips sockets that closed meanwhile (send returns false
    /// instead of writing after the close frame).
    @Test func broadcastToAClosedSocketIsRefused() throws {
        let registry = SocketRegistry()
        // Registered on open, never removed: the registry outlives the close.
        let route = recordingRoute(onOpen: { registry.add($0) }, onMessage: { _, _, _ in })
        try withServer(testConfiguration(threads: 1), TestApp(["/ws": route])) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            #expect(eventually { registry.count == 1 })
            client.close()
            #expect(try client.expectClose().code == .normal)
            #expect(eventually { server.metricsSnapshot()[.webSocketsOpen] == 0 })
            let accepted = Counter()
            let done = EventLog<Bool>()
            registry.broadcast(SharedFrame(.text, [0x61]), sent: accepted, done: { done.append(true) })
            #expect(done.next() == true)
            #expect(accepted.value == 0)
        }
    }
}
