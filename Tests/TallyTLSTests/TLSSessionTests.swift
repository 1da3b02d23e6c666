@preconcurrency import Glibc
import Testing
@testable import TallyTLS

@Suite struct TLSSessionTests {
    @Test func handshakeCompletesWithoutVerification() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(!connection.client.isHandshakeComplete)
        #expect(connection.client.protocolVersion == nil)

        let results = connection.handshake()
        #expect(results.client == .done(0))
        #expect(results.server == .done(0))
        #expect(connection.client.isHandshakeComplete)
        #expect(connection.server.isHandshakeComplete)
        #expect(connection.server.protocolVersion == "TLSv1.3")
        // Once complete, handshake() is a cheap no-op.
        #expect(connection.client.handshake() == .done(0))
    }

    @Test func smallMessagesBothWays() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        let hello = Array("hello from client".utf8)
        #expect(try transfer(hello, from: connection.client, to: connection.server).received == hello)
        let reply = Array("hello from server".utf8)
        #expect(try transfer(reply, from: connection.server, to: connection.client).received == reply)
    }

    @Test func severalMiBBothWaysWithPartialWrites() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        let upload = patternBytes(count: 4 << 20, seed: 7)
        let up = try transfer(upload, from: connection.client, to: connection.server)
        #expect(up.received == upload)
        // A 4 MiB write cannot fit an AF_UNIX socket buffer: partial writes must have happened.
        #expect(up.partialWrites > 0)

        let download = patternBytes(count: 3 << 20, seed: 11)
        let down = try transfer(download, from: connection.server, to: connection.client, readSize: 1000)
        #expect(down.received == download)
        #expect(down.partialWrites > 0)
    }

    @Test func emptyReadAndWriteAreNoOps() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))
        #expect(connection.client.write(UnsafeRawBufferPointer(start: nil, count: 0)) == .done(0))
        #expect(connection.server.read(into: UnsafeMutableRawBufferPointer(start: nil, count: 0)) == .done(0))
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(buffer.withUnsafeMutableBytes { connection.server.read(into: $0) } == .wantRead)
    }

    @Test func bufferedPlaintextIsReported() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        let message = patternBytes(count: 1000, seed: 3)
        #expect(message.withUnsafeBytes { connection.client.write($0) } == .done(1000))
        #expect(!connection.server.hasBufferedPlaintext)

        var small = [UInt8](repeating: 0, count: 10)
        #expect(small.withUnsafeMutableBytes { connection.server.read(into: $0) } == .done(10))
        // The record was decrypted whole; 990 bytes wait inside OpenSSL with
        // nothing left on the socket for epoll to report.
        #expect(connection.server.hasBufferedPlaintext)

        var rest = [UInt8](repeating: 0, count: 2000)
        #expect(rest.withUnsafeMutableBytes { connection.server.read(into: $0) } == .done(990))
        #expect(!connection.server.hasBufferedPlaintext)
        #expect(Array(small + rest[..<990]) == message)
    }

    @Test func verifiedClientWithCAFileAndHostName() throws {
        let fixture = try Fixture()
        let client = try TLSContext.client(caFile: fixture.certificateFile, verifyPeer: true)
        let connection = try fixture.connect(client: client, serverName: "localhost")
        #expect(connection.handshake() == (.done(0), .done(0)))
        let ping = Array("ping".utf8)
        #expect(try transfer(ping, from: connection.client, to: connection.server).received == ping)
    }

    @Test func verifiedClientWithIPAddress() throws {
        let fixture = try Fixture()
        let client = try TLSContext.client(caFile: fixture.certificateFile, verifyPeer: true)
        let connection = try fixture.connect(client: client, serverName: "127.0.0.1")
        #expect(connection.handshake() == (.done(0), .done(0)))
        // RFC 6066 §3: IP literals are not sent as SNI.
        #expect(connection.server.receivedServerName == nil)
    }

    @Test func hostNameIsSentAsSNI() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false), serverName: "localhost")
        #expect(connection.handshake() == (.done(0), .done(0)))
        #expect(connection.server.receivedServerName == "localhost")
    }

    @Test func verificationWithoutTheCAFails() throws {
        let fixture = try Fixture()
        let client = try TLSContext.client(verifyPeer: true)
        let connection = try fixture.connect(client: client, serverName: "localhost")
        let results = connection.handshake()
        let message = try #require(results.client.failureMessage)
        #expect(message.contains("TLS handshake failed"))
        #expect(message.contains("certificate verify failed"))
        #expect(message.contains("self-signed certificate"))
        // The server hears the client's alert (or EOF) and ends too.
        #expect(results.server != .done(0))
    }

    @Test func wrongHostNameFails() throws {
        let fixture = try Fixture()
        let client = try TLSContext.client(caFile: fixture.certificateFile, verifyPeer: true)
        let connection = try fixture.connect(client: client, serverName: "example.com")
        let message = try #require(connection.handshake().client.failureMessage)
        #expect(message.contains("certificate verify failed"))
        #expect(message.contains("hostname mismatch"))
    }

    @Test func wrongIPAddressFails() throws {
        let fixture = try Fixture()
        let client = try TLSContext.client(caFile: fixture.certificateFile, verifyPeer: true)
        let connection = try fixture.connect(client: client, serverName: "127.0.0.2")
        let message = try #require(connection.handshake().client.failureMessage)
        #expect(message.contains("IP address mismatch"))
    }

    @Test func verifyingClientRequiresServerName() throws {
        let pair = try SocketPair()
        let client = try TLSContext.client(verifyPeer: true)
        #expect(throws: TLSError.self) {
            _ = try TLSSession(context: client, fd: pair.clientFD, isServer: false)
        }
    }

    @Test func shutdownMakesPeerReadClosed() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        connection.client.shutdown()
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(buffer.withUnsafeMutableBytes { connection.server.read(into: $0) } == .closed)
        // The server answers with its own close_notify; the client sees it.
        connection.server.shutdown()
        #expect(buffer.withUnsafeMutableBytes { connection.client.read(into: $0) } == .closed)
    }

    @Test func eofWithoutCloseNotifyIsClosed() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        connection.pair.closeClient()
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(buffer.withUnsafeMutableBytes { connection.server.read(into: $0) } == .closed)
        // Terminal: asking again gives the same answer without touching OpenSSL.
        #expect(buffer.withUnsafeMutableBytes { connection.server.read(into: $0) } == .closed)
        connection.server.shutdown()  // must be a harmless no-op now
    }

    @Test func eofDuringHandshakeIsClosed() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.server.handshake() == .wantRead)
        connection.pair.closeClient()
        #expect(connection.server.handshake() == .closed)
    }

    @Test func garbageFailsTheServerHandshake() throws {
        let fixture = try Fixture()
        let pair = try SocketPair()
        let server = try TLSSession(context: fixture.serverContext, fd: pair.serverFD, isServer: true)
        let garbage = patternBytes(count: 300, seed: 99)
        #expect(garbage.withUnsafeBytes { write(pair.clientFD, $0.baseAddress, $0.count) } == 300)

        let message = try #require(server.handshake().failureMessage)
        #expect(message.hasPrefix("TLS handshake failed: error:"))
        #expect(message.contains("SSL routines"))
        // Terminal and shutdown-safe after a fatal error.
        #expect(server.handshake().failureMessage == message)
        server.shutdown()
    }

    @Test func plainHTTPToTheServerFails() throws {
        let fixture = try Fixture()
        let pair = try SocketPair()
        let server = try TLSSession(context: fixture.serverContext, fd: pair.serverFD, isServer: true)
        let request = Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
        #expect(request.withUnsafeBytes { write(pair.clientFD, $0.baseAddress, $0.count) } == request.count)
        let message = try #require(server.handshake().failureMessage)
        #expect(message.contains("http request"))
    }

    @Test func oneSessionsErrorDoesNotLeakIntoAnother() throws {
        let fixture = try Fixture()
        let broken = try SocketPair()
        let failing = try TLSSession(context: fixture.serverContext, fd: broken.serverFD, isServer: true)
        let garbage = patternBytes(count: 64, seed: 5)
        _ = garbage.withUnsafeBytes { write(broken.clientFD, $0.baseAddress, $0.count) }
        #expect(failing.handshake().failureMessage != nil)

        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))
        let bytes = Array("still fine".utf8)
        #expect(try transfer(bytes, from: connection.server, to: connection.client).received == bytes)
    }

    @Test func writeToAClosedPeerFailsWithoutSIGPIPE() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        #expect(connection.handshake() == (.done(0), .done(0)))

        connection.pair.closeClient()
        let bytes = Array("into the void".utf8)
        // send(MSG_NOSIGNAL): EPIPE comes back as an error, not a signal.
        let message = try #require(bytes.withUnsafeBytes { connection.server.write($0) }.failureMessage)
        #expect(message.contains("TLS write failed: socket error"))
        #expect(message.contains("errno \(EPIPE)"))
    }

    @Test func shutdownBeforeHandshakeIsANoOp() throws {
        let fixture = try Fixture()
        let connection = try fixture.connect(client: TLSContext.client(verifyPeer: false))
        connection.client.shutdown()
        connection.server.shutdown()
        #expect(connection.handshake() == (.done(0), .done(0)))
    }
}
