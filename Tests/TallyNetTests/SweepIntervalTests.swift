import Dispatch
import Testing
import TallyConcurrency
@testable import TallyNet

/// The loop checks timeouts every `sweepInterval`: "often enough for the
/// shortest one" (a quarter of it, between 20 ms and 1 s), so a timeout
/// fires at most a quarter late.
@Suite struct SweepIntervalTests {
    @Test func defaultsSweepOncePerSecond() {
        #expect(sweepInterval(ServerConfiguration()) == 1_000)
    }

    @Test func shortPingIntervalSweepsOften() {
        var configuration = ServerConfiguration()
        configuration.webSocket.pingIntervalMillis = 100
        #expect(sweepInterval(configuration) == 25)
    }

    @Test func shortRequestTimeoutSweepsOften() {
        var configuration = ServerConfiguration()
        configuration.requestTimeoutMillis = 300
        #expect(sweepInterval(configuration) == 75)
    }

    @Test func neverBelowTwentyMilliseconds() {
        var configuration = ServerConfiguration()
        configuration.webSocket.idleTimeoutMillis = 10
        #expect(sweepInterval(configuration) == 20)
    }

    /// The TLS handshake timeout is enforced by the same sweep
    /// (`Connection.sweep`, phase `.tlsHandshake`), so it must count too:
    /// with a 200 ms handshake timeout and a 1 s sweep, a silent client
    /// holds its slot for up to 1.2 s.
    @Test func shortTLSHandshakeTimeoutSweepsOften() {
        var configuration = ServerConfiguration()
        configuration.tlsHandshakeTimeoutMillis = 200
        #expect(sweepInterval(configuration) <= 50)
    }
}

@Suite struct LoopSweepTests {
    /// A client loop sweeps as often as its most demanding connection needs:
    /// a later client with shorter timeouts lowers the interval, a later one
    /// with longer timeouts does not raise it.
    @Test func clientLoopsSweepAtTheShortestInterval() throws {
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        let loop = group.loops[0]
        let seen = LockedValueBox<[Int64?]>([])
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            loop.ensureSweeping(every: 1000)
            loop.ensureSweeping(every: 100)
            loop.ensureSweeping(every: 500)
            seen.withLock { $0.append(loop.sweepIntervalMillis) }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + .seconds(5)) == .success)
        #expect(seen.withLock { $0 } == [100])
    }

    @Test func groupShutdownTwiceIsHarmless() throws {
        let group = try EventLoopGroup(threads: 2)
        group.shutdown()
        group.shutdown()
    }
}
