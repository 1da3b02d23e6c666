import Testing
@testable import TallyNet
import TallyServer

let metricNames = [
    "tally_connections_open", "tally_connections_accepted_total", "tally_websockets_open",
    "tally_websocket_upgrades_total", "tally_http_requests_total", "tally_messages_in_total",
    "tally_messages_out_total", "tally_bytes_in_total", "tally_bytes_out_total",
    "tally_slow_consumer_disconnects_total", "tally_protocol_errors_total", "tally_idle_timeouts_total",
    "tally_tls_handshake_failures_total", "tally_http_read_pauses_total",
]

/// The value of `name` in a Prometheus text exposition.
func metricValue(_ text: String, _ name: String) -> Int? {
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        if parts.count == 2, parts[0] == name { return Int(parts[1]) }
    }
    return nil
}

@Suite struct MetricsTests {
    @Test func countersMoveWithTraffic() throws {
        try withHub { hub, clients in
            let before = hub.server.metricsSnapshot()
            #expect(before[.connectionsAccepted] == 0)
            #expect(before[.webSocketsOpen] == 0)

            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next())
            for i in 0..<3 { client.send(.text, Array("m\(i)".utf8)) }
            for _ in 0..<3 { _ = try client.expectMessage() }

            let during = hub.server.metricsSnapshot()
            #expect(during[.connectionsAccepted] == 1)
            #expect(during[.connectionsOpen] == 1)
            #expect(during[.webSocketUpgrades] == 1)
            #expect(during[.webSocketsOpen] == 1)
            #expect(during[.httpRequests] == 1)
            #expect(during[.messagesIn] == 3)
            #expect(during[.messagesOut] == 3)
            #expect(during[.bytesIn] > 0)
            #expect(during[.bytesOut] > 0)

            client.close()
            _ = try client.expectClose()
            #expect(eventually {
                let after = hub.server.metricsSnapshot()
                return after[.webSocketsOpen] == 0 && after[.connectionsOpen] == 0
            })
            let after = hub.server.metricsSnapshot()
            #expect(after[.webSocketUpgrades] == 1, "a counter went down")
            #expect(after[.connectionsAccepted] == 1)
            #expect(after[.slowConsumerDisconnects] == 0)
            #expect(after[.protocolErrors] == 0)
        }
    }

    @Test func prometheusTextNamesEveryMetric() {
        var snapshot = NetMetricsSnapshot()
        snapshot[.connectionsAccepted] = 7
        snapshot[.messagesOut] = 42
        let text = snapshot.prometheusText
        for name in metricNames {
            #expect(text.contains("# TYPE \(name) "), "\(name)")
            #expect(text.contains("# HELP \(name) "), "\(name)")
            #expect(metricValue(text, name) != nil, "\(name) has no sample line")
        }
        #expect(metricValue(text, "tally_connections_accepted_total") == 7)
        #expect(metricValue(text, "tally_messages_out_total") == 42)
        #expect(text.contains("# TYPE tally_connections_open gauge"))
        #expect(text.contains("# TYPE tally_messages_in_total counter"))
        #expect(text.hasSuffix("\n"))
    }

    /// The hub's /metrics serves the same figures over HTTP.
    @Test func hubServesMetrics() throws {
        try withHub { hub, clients in
            let client = try BlockingWebSocket(url: wsURL(hub.port, "/echo"), loop: clients.next())
            client.send(.binary, [1, 2, 3])
            _ = try client.expectMessage()

            let raw = try RawSocket(port: hub.port)
            defer { raw.close() }
            try raw.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.status == 200)
            #expect(response.head.headers["Content-Type"]?.hasPrefix("text/plain; version=0.0.4") == true)
            let text = response.text
            for name in metricNames { #expect(metricValue(text, name) != nil, "\(name) missing from /metrics") }
            #expect(metricValue(text, "tally_websocket_upgrades_total") == 1)
            #expect(metricValue(text, "tally_websockets_open") == 1)
            #expect(metricValue(text, "tally_messages_in_total") == 1)
            #expect(metricValue(text, "tally_messages_out_total") == 1)
            #expect(metricValue(text, "tally_connections_accepted_total") == 2)
            #expect(metricValue(text, "tally_connections_open") == 2)
            // The upgrade and this request.
            #expect(metricValue(text, "tally_http_requests_total") == 2)
        }
    }
}
