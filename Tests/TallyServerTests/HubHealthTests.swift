import Synchronization
import Testing
import TallyProtocol
import TallyTestSupport
@testable import TallyServer

/// Sync health (issue 5): what each client reports and has been sent, the
/// admin view of it, spreading out resyncs after a restart, and the
/// workflows a client merges by.
@Suite("Hub: sync health")
struct HubHealthTests {
    @Test func clientsReportLagOutboxAndLastContact() throws {
        try withHub { hub in
            let mirror = try hub.connect()
            let writer = try hub.connect()
            let hello = try mirror.ok(#"{"op":"hello","client":"mirror:a","outbox":7}"#)
            #expect(hello["retryAfterMs"] != nil, "a hub that just started spreads resyncs out")
            if case .number(let delay)? = hello["retryAfterMs"] {
                #expect((0...HubCore.maxRetryDelayMillis).contains(delay.int64Value ?? -1))
            }
            for index in 0..<3 { try writer.ok(#"{"op":"set","name":"jobs/\#(index)","data":{}}"#) }

            var clients = try Self.clients(hub)
            #expect(clients["head"] == 3)
            var row = try #require(Self.row(clients, client: "mirror:a"))
            #expect(row["outbox"] == 7)
            #expect(row["seq"] == 0 && row["lag"] == 3, "it was sent nothing after its hello at seq 0")

            try mirror.ok(#"{"op":"report","outbox":2,"seq":2}"#)
            let metrics = String(decoding: try hub.http("GET", "/metrics").body, as: UTF8.self)
            #expect(metrics.contains("\ntally_client_outbox_total 2\n"), "outbox total follows reports")
            #expect(metrics.contains("\ntally_clients 1\n"), "one client said hello")
            clients = try Self.clients(hub)
            row = try #require(Self.row(clients, client: "mirror:a"))
            #expect(row["outbox"] == 2 && row["seq"] == 2 && row["lag"] == 1)
            #expect(Set(row.keys) == ["session", "client", "user", "connectedMs", "seq", "lag", "outbox", "lastAckMs", "hub"])
            #expect(row["hub"] == .string(hub.hub.name))

            // A subscriber's seq follows what it is sent.
            try mirror.ok(#"{"op":"subscribe","prefix":"jobs/"}"#)
            try writer.ok(#"{"op":"set","name":"jobs/9","data":{}}"#)
            _ = try mirror.push()
            row = try #require(Self.row(try Self.clients(hub), client: "mirror:a"))
            #expect(row["seq"] == 4 && row["lag"] == 0)

            #expect(try mirror.request(#"{"op":"report"}"#).errorCode == "bad_field")
            #expect(try mirror.request(#"{"op":"report","outbox":-1}"#).errorCode == "bad_field")
        }
    }

    @Test func onlyAdminsReadTheClientList() throws {
        try withHub({ configuration in
            configuration.core.authenticator = Authenticator(users: [
                HubUser(name: "root", role: "admin", tokenHash: Authenticator.sha256(Array("r".utf8))),
                HubUser(name: "ana", role: "staff", tokenHash: Authenticator.sha256(Array("a".utf8))),
            ])
        }) { hub throws in
            #expect(try hub.http("GET", "/v1/admin/clients").status == 401)
            #expect(try hub.http("GET", "/v1/admin/clients", headers: ["Authorization": "Bearer a"]).status == 403)
            #expect(try hub.http("GET", "/v1/admin/clients", headers: ["Authorization": "Bearer r"]).status == 200)
            #expect(try hub.http("GET", "/v1/workflows", headers: ["Authorization": "Bearer a"]).status == 200)
        }
    }

    @Test func retryAfterStopsOnceTheHubHasBeenUpAWhile() throws {
        let clock = ManualClock()
        try withHub({ $0.core.clock = { clock.now } }) { hub throws in
            clock.advance(by: HubCore.retryWindowMillis)
            let client = try hub.connect()
            #expect(try client.ok(#"{"op":"hello"}"#)["retryAfterMs"] == nil)
        }
    }

    @Test func workflowsArePublished() throws {
        try withHub { hub in
            let result = try hub.http("GET", "/v1/workflows")
            #expect(result.status == 200)
            guard case .object(let body) = try JSONValue.parse(result.body),
                  case .array(let flows)? = body["workflows"] else { throw TestFailure("no workflows: \(result.body)") }
            let orders = try #require(flows.compactMap(\.objectValue).first { $0["prefix"] == "orders/" })
            #expect(orders["stages"] == ["received", "in-progress", "ready", "delivered", "cancelled"])
            #expect(orders["transitions"]?.objectValue?["ready"] == ["delivered", "cancelled"])
            #expect(orders["terminal"] == ["cancelled", "delivered"])
            #expect(orders["stageField"] == "stage")
        }
    }

    static func clients(_ hub: HubFixture) throws -> JSONObject {
        let result = try hub.http("GET", "/v1/admin/clients")
        guard result.status == 200, case .object(let body) = try JSONValue.parse(result.body) else {
            throw TestFailure("GET /v1/admin/clients: \(result.status)")
        }
        return body
    }

    static func row(_ clients: JSONObject, client: String) -> JSONObject? {
        clients["clients"]?.arrayValue?.compactMap(\.objectValue).first { $0["client"] == .string(client) }
    }
}

/// A clock tests move by hand (read by the core thread).
final class ManualClock: Sendable {
    private let millis = Atomic<Int64>(1_795_000_000_000)
    var now: Int64 { millis.load(ordering: .relaxed) }
    func advance(by delta: Int64) { millis.add(delta, ordering: .relaxed) }
}
