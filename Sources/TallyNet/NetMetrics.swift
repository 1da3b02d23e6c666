import Synchronization

/// Every figure the network layer counts, with its Prometheus name and help.
/// One list: loops count into it, snapshots sum it, `/metrics` renders it.
public enum NetCounter: Int, CaseIterable, Sendable {
    case connectionsOpen, connectionsAccepted, webSocketsOpen, webSocketUpgrades, httpRequests
    case messagesIn, messagesOut, bytesIn, bytesOut
    case slowConsumerDisconnects, protocolErrors, idleTimeouts, tlsHandshakeFailures, httpReadPauses

    /// Gauges go up and down; counters only up.
    var isGauge: Bool { self == .connectionsOpen || self == .webSocketsOpen }

    var prometheusName: String {
        switch self {
        case .connectionsOpen: "tally_connections_open"
        case .connectionsAccepted: "tally_connections_accepted_total"
        case .webSocketsOpen: "tally_websockets_open"
        case .webSocketUpgrades: "tally_websocket_upgrades_total"
        case .httpRequests: "tally_http_requests_total"
        case .messagesIn: "tally_messages_in_total"
        case .messagesOut: "tally_messages_out_total"
        case .bytesIn: "tally_bytes_in_total"
        case .bytesOut: "tally_bytes_out_total"
        case .slowConsumerDisconnects: "tally_slow_consumer_disconnects_total"
        case .protocolErrors: "tally_protocol_errors_total"
        case .idleTimeouts: "tally_idle_timeouts_total"
        case .tlsHandshakeFailures: "tally_tls_handshake_failures_total"
        case .httpReadPauses: "tally_http_read_pauses_total"
        }
    }

    var help: String {
        switch self {
        case .connectionsOpen: "Open TCP connections (HTTP and WebSocket)."
        case .connectionsAccepted: "Accepted TCP connections."
        case .webSocketsOpen: "Open WebSocket connections."
        case .webSocketUpgrades: "Successful WebSocket handshakes."
        case .httpRequests: "HTTP requests parsed."
        case .messagesIn: "WebSocket messages received."
        case .messagesOut: "WebSocket messages queued for sending."
        case .bytesIn: "Bytes read from sockets (after TLS)."
        case .bytesOut: "Bytes written to sockets (before TLS)."
        case .slowConsumerDisconnects: "Connections closed because their outbound buffer was full."
        case .protocolErrors: "Connections closed for a protocol violation."
        case .idleTimeouts: "Connections closed by an idle, request or handshake timeout."
        case .tlsHandshakeFailures: "TLS handshakes that failed."
        case .httpReadPauses: "Times an HTTP connection stopped reading until the client read its queued answers."
        }
    }
}

/// The counters one loop updates. Atomic with relaxed ordering: each loop
/// writes only its own set, so the adds are uncontended; readers sum loops.
public final class LoopMetrics: Sendable {
    private let values: InlineArray<14, Atomic<Int>> = InlineArray { _ in Atomic(0) }

    init() {
        // The unchecked index in `add` relies on one slot per counter.
        precondition(values.count == NetCounter.allCases.count, "LoopMetrics needs one slot per NetCounter")
    }

    /// On every message, so unchecked: `init` proved every raw value fits.
    /// (Checked indexing cost 3 % of an echo's instructions, see BENCHMARKS.md.)
    @inline(__always)
    func add(_ counter: NetCounter, _ n: Int = 1) {
        values[unchecked: counter.rawValue].add(n, ordering: .relaxed)
    }

    func value(_ counter: NetCounter) -> Int {
        values[counter.rawValue].load(ordering: .relaxed)
    }
}

/// The network layer's figures at one moment, summed over every loop.
public struct NetMetricsSnapshot: Sendable {
    private var values = [Int](repeating: 0, count: NetCounter.allCases.count)

    public init() {}

    public subscript(_ counter: NetCounter) -> Int {
        get { values[counter.rawValue] }
        set { values[counter.rawValue] = newValue }
    }

    /// Prometheus text exposition (version 0.0.4).
    public var prometheusText: String {
        var out = ""
        for counter in NetCounter.allCases {
            let name = counter.prometheusName
            out += "# HELP \(name) \(counter.help)\n"
            out += "# TYPE \(name) \(counter.isGauge ? "gauge" : "counter")\n"
            out += "\(name) \(self[counter])\n"
        }
        return out
    }
}
