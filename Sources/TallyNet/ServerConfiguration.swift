import TallyHTTP
import TallyTLS
import TallyWebSocket

/// WebSocket behaviour shared by the server and the client.
public struct WebSocketOptions: Sendable {
    /// Largest message accepted (after decompression); larger closes with 1009.
    public var maxMessageSize = 16 << 20
    public var deflate = PerMessageDeflateConfig()
    /// Send a ping when nothing arrived for this long.
    public var pingIntervalMillis: Int64 = 30_000
    /// Close with 1001 when nothing (not even a pong) arrived for this long.
    public var idleTimeoutMillis: Int64 = 75_000
    /// How long to wait for the peer's close frame, or for it to close TCP, after ours.
    public var closeTimeoutMillis: Int64 = 5_000
    /// Slow-consumer bound: when this many bytes are already queued for a
    /// connection and another frame would pass it, the connection is closed
    /// with 1008. A single frame larger than the bound is accepted when the
    /// queue is empty, so one big message never trips it on its own.
    public var maxOutboundBytes = 8 << 20
    public init() {}
}

/// Everything `Server` needs, frozen before start.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    /// 0 picks a free port (read it back from `Server.port`).
    public var port = 8080
    public var threads = ServerConfiguration.coreCount
    public var tls: TLSContext?
    public var webSocket = WebSocketOptions()
    public var httpLimits = HTTPLimits()
    /// Close a keep-alive connection that sends no request for this long.
    public var keepAliveTimeoutMillis: Int64 = 60_000
    /// Answer 408 and close when a started request is not complete in this long.
    public var requestTimeoutMillis: Int64 = 15_000
    public var tlsHandshakeTimeoutMillis: Int64 = 10_000
    /// On shutdown, how long connections get to finish their close handshakes.
    public var shutdownGraceMillis: Int64 = 5_000
    public var listenBacklog: Int32 = 4096
    public var logger = Logger()
    /// Where the loops read the time (connection timeouts, timers); tests
    /// inject a `ManualClock` and move it instead of sleeping.
    public var clock: any LoopClock = MonotonicClock()

    public init() {}

    public static var coreCount: Int {
        max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }
}

import Glibc
