import Testing
import TallyConcurrency
@testable import TallyNet
import TallyWebSocket

/// The timeouts end to end — a real server and real sockets — on a
/// `ManualClock`: each test moves the clock past a limit and sees what the
/// client sees. Nothing sleeps, and the limits are the defaults.
@Suite struct ConnectionTimeoutTests {
    /// A client that never answers pings gets a ping after the ping
    /// interval, a 1001 close after the idle timeout, and TCP closed after
    /// the close timeout; our client, which answers pings, stays connected.
    @Test func idleClientsArePingedThenClosed() throws {
        try withManualClock(testConfiguration(), TestApp()) { server, clients, clock in
            let answering = try BlockingWebSocket(url: wsURL(server.port), loop: clients.next())
            let silent = try RawSocket(port: server.port)
            defer { silent.close() }
            try silent.upgrade()

            // The sweep runs once a second: a limit is noticed at the first
            // sweep past it, as on the real clock.
            let bytesIn = server.metricsSnapshot()[.bytesIn]
            try clock.advance(byMillis: 30_000, on: server)
            #expect(server.metricsSnapshot()[.bytesIn] == bytesIn, "pinged before the interval")
            try clock.advance(byMillis: 1_000, on: server)
            guard case .ping? = try silent.nextEvent() else {
                Issue.record("expected a ping after the ping interval")
                return
            }
            // The answering client's pong reaches the server.
            #expect(eventually { server.metricsSnapshot()[.bytesIn] > bytesIn })

            try clock.advance(byMillis: 44_000, on: server)
            #expect(server.metricsSnapshot()[.idleTimeouts] == 0, "closed before the idle timeout")
            try clock.advance(byMillis: 1_000, on: server)
            guard case .close(let code, let reason)? = try silent.nextEvent() else {
                Issue.record("expected a close after the idle timeout")
                return
            }
            #expect(code == .goingAway)
            #expect(reason == "idle timeout: nothing received for 75000 ms")
            #expect(server.metricsSnapshot()[.idleTimeouts] == 1)

            // No answer to the close: TCP goes after the close timeout.
            try clock.advance(byMillis: 5_000, on: server)
            try clock.advance(byMillis: 1_000, on: server)  // the sweep runs once a second
            #expect(silent.waitForEOF())

            // The answering client has been silent as long: still open.
            answering.send(.text, Array("alive".utf8))
            #expect(try answering.expectMessage().payload == Array("alive".utf8))
        }
    }

    /// A request that stops halfway is answered 408 and closed once the
    /// request timeout passes, not before.
    @Test func incompleteRequestTimesOutWith408() throws {
        try withManualClock(testConfiguration(), TestApp()) { server, _, clock in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            let partial = "GET /hello HTTP/1.1\r\nHost: localhost\r\n"
            try raw.send(partial)
            // The request's clock starts when its first bytes are read: wait
            // for that before moving time (a loaded machine may take more
            // than the two loop iterations `advance` settles first).
            #expect(eventually { server.metricsSnapshot()[.bytesIn] >= partial.utf8.count })
            try clock.advance(byMillis: 15_000, on: server)
            #expect(server.metricsSnapshot()[.idleTimeouts] == 0, "timed out before the limit")
            try clock.advance(byMillis: 1_000, on: server)
            let response = try raw.readResponse()
            #expect(response.status == 408)
            #expect(response.text.contains("request_timeout"))
            #expect(response.text.contains("within 15000 ms"))
            #expect(raw.waitForEOF())
        }
    }

    /// The request timeout does not cut an idle keep-alive connection that
    /// finished its request; the keep-alive timeout does, later.
    @Test func idleKeepAliveExpiresAfterItsOwnTimeout() throws {
        try withManualClock(testConfiguration(), TestApp()) { server, _, clock in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try raw.readResponse().status == 200)
            try clock.advance(byMillis: 59_000, on: server)
            try raw.send("GET /world HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try raw.readResponse().text == "world", "closed before the keep-alive timeout")

            try clock.advance(byMillis: 60_000, on: server)
            #expect(server.metricsSnapshot()[.connectionsOpen] == 1)
            try clock.advance(byMillis: 1_000, on: server)
            #expect(raw.waitForEOF())
            #expect(server.metricsSnapshot()[.connectionsOpen] == 0)
            #expect(server.metricsSnapshot()[.idleTimeouts] == 0, "a keep-alive close is not a timeout")
        }
    }

    /// A TCP client that never starts the TLS handshake is dropped after
    /// the handshake timeout.
    @Test func silentTLSClientIsDropped() throws {
        let tls = try TLSFixture()
        try withManualClock(testConfiguration { $0.tls = tls.server }, TestApp()) { server, _, clock in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            // The handshake's clock starts at the accept.
            #expect(eventually { server.metricsSnapshot()[.connectionsAccepted] == 1 })
            try clock.advance(byMillis: 10_000, on: server)
            #expect(server.metricsSnapshot()[.connectionsOpen] == 1)
            try clock.advance(byMillis: 1_000, on: server)
            #expect(raw.waitForEOF(), "a silent client held a TLS handshake slot open")
            #expect(server.metricsSnapshot()[.connectionsOpen] == 0)
            #expect(server.metricsSnapshot()[.idleTimeouts] == 1)
        }
    }
}
