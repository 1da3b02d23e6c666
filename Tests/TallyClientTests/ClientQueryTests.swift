import Testing
import TallyClient
import TallyHubTestSupport
import TallyProtocol
import TallyTestSupport

private let openOrders = Query(prefix: "orders/", conditions: [
    Query.Condition(path: try! RecordPath(parsing: "stage"),
                    values: ["received", "in-progress", "ready"].map { JSONValue.string($0).serialized() }),
])

/// `TallyClient.observe(query:)`: a live query's result with Realm-style
/// change sets, across pushes and a reconnect that resumes by delta.
@Suite struct ClientQueryTests {
    @Test func aQueryObservationReportsEnteredChangedAndLeft() async throws {
        let directory = try TemporaryDirectory(prefix: "client-query")
        let hub = try RestartableHub(dataDirectory: directory.path)
        let writer = try await liveClient(hub.url)
        defer { writer.close() }
        _ = try await writer.set("items/cup", data: ["sku": "CUP", "stock": 100])
        _ = try await writer.set("orders/a", data: ["item": "items/cup", "qty": 1])
        let updates = Recorder<ObservationUpdate>()
        let client = try await liveClient(hub.url, options: testOptions { $0.backoff = Backoff(baseMillis: 20, capMillis: 100) })
        defer { client.close() }
        _ = client.observe(query: openOrders) { updates.append($0) }
        func next(_ count: Int) async throws -> ChangeSet {
            try await updates.wait("update \(count)") { $0.count >= count }[count - 1].changes
        }
        #expect(try await next(1) == ChangeSet(inserted: ["orders/a"]))
        #expect(updates.all[0].isInitial)
        _ = try await writer.set("orders/b", data: ["item": "items/cup", "qty": 2])
        #expect(try await next(2) == ChangeSet(inserted: ["orders/b"]))
        _ = try await writer.advance("orders/a", to: "in-progress")
        #expect(try await next(3).modified["orders/a"]?.contains("stage") == true)
        _ = try await writer.advance("orders/a", to: "cancelled")
        #expect(try await next(4) == ChangeSet(deleted: ["orders/a"]))
        #expect(updates.all[3].records.keys.sorted() == ["orders/b"])

        // Away while the result changes: the resume's delta is one change set.
        hub.stop()
        try await hub.offside { url in
            let other = try await liveClient(url)
            defer { other.close() }
            _ = try await other.advance("orders/b", to: "cancelled")
            _ = try await other.set("orders/c", data: ["item": "items/cup", "qty": 3])
        }
        try hub.start()
        #expect(try await next(5) == ChangeSet(inserted: ["orders/c"], deleted: ["orders/b"]))
        #expect(updates.all[4].records.keys.sorted() == ["orders/c"])
    }
}
