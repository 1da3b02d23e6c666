import Synchronization
import Testing
import TallyProtocol
import TallyTestSupport
@testable import TallyServer

/// `GET /v1/admin/clients` across hubs (issue 16): every row names its hub;
/// hubs on one PostgreSQL database publish their rows for each other, and
/// rows of a hub that stops publishing expire.
@Suite("Hub: clients of every hub")
struct ClientHealthTests {
    @Test func everyRowNamesItsHub() throws {
        try withHub({ $0.hubName = "storeroom-1" }) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"hello","client":"scanner"}"#)
            let row = try #require(HubHealthTests.row(try HubHealthTests.clients(hub), client: "scanner"))
            #expect(row["hub"] == "storeroom-1")
            #expect(hub.hub.name == "storeroom-1")
        }
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"hello","client":"scanner"}"#)
            let row = try #require(HubHealthTests.row(try HubHealthTests.clients(hub), client: "scanner"))
            let name = try #require(row["hub"]?.stringValue)
            #expect(name == HubName.standard(port: hub.port) && name.hasSuffix(":\(hub.port)"),
                    "the default is <hostname>:<port>: \(name)")
        }
    }

    @Test func hubNamesAreChecked() throws {
        for good in ["a", "storeroom-1", "hub.example:8080", "eu/west@2_b", String(repeating: "x", count: 128)] {
            #expect(HubName.problem(good) == nil, "\(good)")
        }
        for bad in ["", "two words", "tab\there", "é", "quote\"", String(repeating: "x", count: 129)] {
            #expect(HubName.problem(bad) != nil, "\(bad)")
        }
        #expect(throws: HubConfigFile.Invalid.self) { try HubConfigFile.parse(["hubName": "two words"]) }
        #expect(try HubConfigFile.parse(["hubName": "storeroom-1"]).hubName == "storeroom-1")
        var flags = HubOverrides()
        flags.hubName = "from-flag"
        let file = try? HubConfigFile.parse(["hubName": "from-file"])
        #expect(HubConfiguration(file: file, overrides: flags).hubName(port: 1) == "from-flag")
        #expect(HubConfiguration(file: file, overrides: HubOverrides()).hubName(port: 1) == "from-file")
    }

    /// What one hub publishes another reads back, whatever order jsonb
    /// gave the members; something else is skipped.
    @Test func publishedRowsReadBack() throws {
        let row = ClientRow(session: 7, client: "mirror:a", user: nil, connectedMs: 1_500, seq: 40, outbox: 2, lastAckMs: 300)
        #expect(ClientRow(published: Array(row.publishedJSON().utf8)) == row)
        let reordered = #"{"seq": 40, "user": null, "client": "mirror:a", "outbox": 2, "session": 7, "lastAckMs": 300, "connectedMs": 1500}"#
        #expect(ClientRow(published: Array(reordered.utf8)) == row)
        #expect(ClientRow(published: Array(#"{"session": 7}"#.utf8)) == nil)
        #expect(ClientRow(published: Array("not json".utf8)) == nil)
    }

    /// Other hubs' rows grow older with the time since they were read, lag
    /// behind the database's head (or this hub's, when further on), and
    /// drop out once older than the freshness window.
    @Test func otherHubsRowsAgeAndExpire() throws {
        let clock = Atomic<Int64>(1_000)
        let health = ClientHealth(freshMillis: 5_000, clock: { clock.load(ordering: .relaxed) })
        health.hubName = "b"
        let theirs = ClientRow(session: 3, client: "far", user: "ana", connectedMs: 10_000, seq: 90, outbox: 0, lastAckMs: 200)
        health.received(head: 100, rows: [.init(hub: "a", row: theirs, ageMillis: 1_000)])
        let mine = ClientRow(session: 1, client: "near", user: nil, connectedMs: 5, seq: 20, outbox: 1, lastAckMs: 5)

        clock.store(3_000, ordering: .relaxed)
        var report = try Self.parse(health.report(local: ClientRows(head: 20, rows: [mine])))
        #expect(report["head"] == 20)
        var rows = try Self.rows(report)
        #expect(rows.map { $0["hub"] } == ["b", "a"])
        #expect(rows[0]["lag"] == 0)
        #expect(rows[1]["lag"] == 10 && rows[1]["connectedMs"] == 13_000 && rows[1]["lastAckMs"] == 3_200,
                "1 s old when read, read 2 s ago: \(rows[1])")
        #expect(Set(rows[1].keys) == ["session", "client", "user", "connectedMs", "seq", "lag", "outbox", "lastAckMs", "hub"])

        report = try Self.parse(health.report(local: ClientRows(head: 150, rows: [])))
        rows = try Self.rows(report)
        #expect(rows.first?["lag"] == 60, "behind this hub's head when it is further on")

        clock.store(5_001, ordering: .relaxed)
        report = try Self.parse(health.report(local: ClientRows(head: 20, rows: [mine])))
        #expect(report["clients"]?.arrayValue?.count == 1, "published over 5 s ago: gone")
    }

    /// Two hubs on one PostgreSQL database: a client of A is listed by B
    /// under A's name, its lag behind the database's head; A's graceful
    /// stop withdraws its rows at once rather than letting them expire.
    @Test func hubsOnOneDatabaseListEachOthersClients() throws {
        let url = try PostgresCluster.shared().createDatabase("clients_hubs")
        func configure(_ name: String) -> (inout HubConfiguration) -> Void {
            { configuration in
                configuration.storeURL = url
                configuration.hubName = name
                configuration.clientPublishing.intervalMillis = 50
                configuration.clientPublishing.freshMillis = 30_000
            }
        }
        let a = try HubFixture(configure("hub-a"))
        var aClosed = false
        defer { if !aClosed { a.close() } }
        let b = try HubFixture(configure("hub-b"))
        defer { b.close() }
        let mirror = try a.connect()
        try mirror.ok(#"{"op":"hello","client":"mirror:a","outbox":4}"#)
        let writer = try b.connect()
        for index in 0..<3 { try writer.ok(#"{"op":"set","name":"jobs/\#(index)","data":{}}"#) }

        var row: JSONObject?
        try waitUntil("B lists A's client", timeoutMillis: 10_000, intervalMillis: 20) {
            row = HubHealthTests.row(try HubHealthTests.clients(b), client: "mirror:a")
            return row?["lag"] == 3
        }
        #expect(row?["hub"] == "hub-a" && row?["outbox"] == 4 && row?["seq"] == 0)
        let own = try #require(HubHealthTests.row(try HubHealthTests.clients(a), client: "mirror:a"))
        #expect(own["hub"] == "hub-a")
        try waitUntil("A lists B's client", timeoutMillis: 10_000, intervalMillis: 20) {
            try Self.rows(try HubHealthTests.clients(a)).contains { $0["hub"] == "hub-b" }
        }

        a.close()
        aClosed = true
        try waitUntil("A's clients to leave B's list", timeoutMillis: 10_000, intervalMillis: 20) {
            HubHealthTests.row(try HubHealthTests.clients(b), client: "mirror:a") == nil
        }
    }

    static func rows(_ report: JSONObject) throws -> [JSONObject] {
        guard let rows = report["clients"]?.arrayValue else { throw TestFailure("no clients: \(report)") }
        return rows.compactMap(\.objectValue)
    }

    static func parse(_ bytes: [UInt8]) throws -> JSONObject {
        guard case .object(let object) = try JSONValue.parse(bytes) else { throw TestFailure("not an object") }
        return object
    }
}
