import Synchronization

/// Counters one loop updates. Atomic with relaxed ordering: each loop writes
/// only its own set, so the adds are uncontended; readers sum across loops.
public final class LoopMetrics: Sendable {
    let connectionsOpen = Atomic<Int>(0)
    let connectionsAccepted = Atomic<Int>(0)
    let webSocketsOpen = Atomic<Int>(0)
    let webSocketUpgrades = Atomic<Int>(0)
    let httpRequests = Atomic<Int>(0)
    let messagesIn = Atomic<Int>(0)
    let messagesOut = Atomic<Int>(0)
    let bytesIn = Atomic<Int>(0)
    let bytesOut = Atomic<Int>(0)
    let slowConsumerDisconnects = Atomic<Int>(0)
    let protocolErrors = Atomic<Int>(0)
    let idleTimeouts = Atomic<Int>(0)
    let tlsHandshakeFailures = Atomic<Int>(0)
    init() {}
}

/// A snapshot of the network layer's counters, summed over every loop.
public struct NetMetricsSnapshot: Sendable {
    public var connectionsOpen = 0
    public var connectionsAccepted = 0
    public var webSocketsOpen = 0
    public var webSocketUpgrades = 0
    public var httpRequests = 0
    public var messagesIn = 0
    public var messagesOut = 0
    public var bytesIn = 0
    public var bytesOut = 0
    public var slowConsumerDisconnects = 0
    public var protocolErrors = 0
    public var idleTimeouts = 0
    public var tlsHandshakeFailures = 0

    /// Prometheus text exposition (version 0.0.4) of these counters.
    public var prometheusText: String {
        var out = ""
        func line(_ name: String, _ type: String, _ help: String, _ value: Int) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        line("tally_connections_open", "gauge", "Open TCP connections (HTTP and WebSocket).", connectionsOpen)
        line("tally_connections_accepted_total", "counter", "Accepted TCP connections.", connectionsAccepted)
        line("tally_websockets_open", "gauge", "Open WebSocket connections.", webSocketsOpen)
        line("tally_websocket_upgrades_total", "counter", "Successful WebSocket handshakes.", webSocketUpgrades)
        line("tally_http_requests_total", "counter", "HTTP requests parsed.", httpRequests)
        line("tally_messages_in_total", "counter", "WebSocket messages received.", messagesIn)
        line("tally_messages_out_total", "counter", "WebSocket messages queued for sending.", messagesOut)
        line("tally_bytes_in_total", "counter", "Bytes read from sockets (after TLS).", bytesIn)
        line("tally_bytes_out_total", "counter", "Bytes written to sockets (before TLS).", bytesOut)
        line("tally_slow_consumer_disconnects_total", "counter",
             "Connections closed because their outbound buffer was full.", slowConsumerDisconnects)
        line("tally_protocol_errors_total", "counter", "Connections closed for a protocol violation.", protocolErrors)
        line("tally_idle_timeouts_total", "counter", "Connections closed by the idle timeout.", idleTimeouts)
        line("tally_tls_handshake_failures_total", "counter", "TLS handshakes that failed.", tlsHandshakeFailures)
        return out
    }
}
