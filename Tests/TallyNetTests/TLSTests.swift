import Testing
import TallyTestSupport
@testable import TallyNet
import TallyServer
import TallyTLS
import TallyWebSocket

/// A self-signed certificate for 127.0.0.1 and the contexts that use it.
final class TLSFixture {
    let directory: TemporaryDirectory
    let certificateFile: String
    let server: TLSContext
    let client: TLSContext

    init() throws {
        directory = try TemporaryDirectory()
        let files = try TLSSelfSigned.generate(commonName: "tally-net-test", directory: directory.path)
        certificateFile = files.certificateFile
        server = try TLSContext.server(certificateChainFile: files.certificateFile, privateKeyFile: files.keyFile)
        client = try TLSContext.client(caFile: files.certificateFile)
    }
}

@Suite struct TLSTests {
    @Test(arguments: [true, false])
    func echoOverTLS(deflate: Bool) throws {
        let tls = try TLSFixture()
        let configuration = testConfiguration { $0.tls = tls.server }
        try withServer(configuration, TestApp()) { server, clients in
            let client = try BlockingWebSocket(url: wsURL(server.port, secure: true), loop: clients.next(),
                                               options: options(deflate: deflate), tls: tls.client)
            #expect((client.deflate != nil) == deflate)
            // Past the 16 KiB TLS record size and the 64 KiB read buffer.
            try roundTrip(client, sizes: [0, 1, 125, 16_383, 16_384, 16_385, 65_537, 300_000, 1 << 20])
            try roundTrip(client, sizes: [50_000], fragmentSize: 7_000)
            client.close()
            #expect(try client.expectClose().code == .normal)
        }
    }

    /// The hub's routes over TLS: the request context says it is TLS, and
    /// a graceful shutdown closes TLS WebSockets with 1001 too.
    @Test func hubOverTLS() throws {
        let tls = try TLSFixture()
        var configuration = HubConfiguration()
        configuration.server = testConfiguration { $0.tls = tls.server }
        configuration.dataDirectory = ":memory:"
        let hub = try Hub(configuration: configuration)
        let clients = try EventLoopGroup(threads: 1)
        defer { clients.shutdown() }
        let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo", secure: true), loop: clients.next(),
                                           tls: tls.client)
        client.send(.text, Array("over tls".utf8))
        #expect(try client.expectMessage().payload == Array("over tls".utf8))
        hub.shutdown()
        #expect(try client.expectClose().code == .goingAway)
    }

    /// A client that does not trust the certificate fails the handshake with
    /// a TLS error, and the server counts the failed handshake.
    @Test func untrustedCertificateFails() throws {
        let tls = try TLSFixture()
        let configuration = testConfiguration { $0.tls = tls.server }
        try withServer(configuration, TestApp()) { server, clients in
            let strict = try TLSContext.client()  // system roots only
            let error = try connectError { () throws(ClientError) in
                try BlockingWebSocket(url: wsURL(server.port, secure: true), loop: clients.next(), tls: strict)
            }
            guard case .tls(let message) = error else {
                Issue.record("expected a TLS error, got \(error)")
                return
            }
            #expect(message.contains("certificate") || message.contains("verify"), "\(message)")
            #expect(eventually { server.metricsSnapshot()[.tlsHandshakeFailures] >= 1 })
            // The server is unharmed.
            let good = try BlockingWebSocket(url: wsURL(server.port, secure: true), loop: clients.next(), tls: tls.client)
            good.send(.text, [0x61])
            #expect(try good.expectMessage().payload == [0x61])
        }
    }

    /// A plain-text client talking to a TLS port fails (and does not hang).
    @Test func plainClientAgainstTLSServerFails() throws {
        let tls = try TLSFixture()
        let configuration = testConfiguration { $0.tls = tls.server }
        try withServer(configuration, TestApp()) { server, clients in
            let error = try connectError { () throws(ClientError) in
                try BlockingWebSocket(url: wsURL(server.port), loop: clients.next(), timeoutMillis: eventTimeout)
            }
            if case .handshake(let message) = error {
                #expect(!message.contains("no answer"), "the client hung instead of failing: \(message)")
            }
            #expect(eventually { server.metricsSnapshot()[.tlsHandshakeFailures] >= 1 })
        }
    }
}
