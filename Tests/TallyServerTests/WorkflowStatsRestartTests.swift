import Testing
import TallyEngine
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

/// After a restart the hub reads a workflow's stats back from its stats
/// record and its list of open records instead of recounting every record
/// the workflow ever had (issue 14, point 4: with a million finished orders
/// the first order write after a start read every one of them). It
/// recounts only when the stats record cannot be trusted.
@Suite("Workflow stats across a restart")
struct WorkflowStatsRestartTests {
    func recounts(_ hub: HubFixture) -> Int { hub.hub.core.metrics.statsRecounts.load(ordering: .relaxed) }

    /// The stats record's figures, without `updated`.
    func figures(_ client: SyncClient) throws -> JSONValue? {
        guard case .object(var data)? = try client.ok(#"{"op":"get","name":"stats/orders"}"#)["data"] else { return nil }
        data["updated"] = nil
        return .object(data)
    }

    func counts(_ figures: JSONValue?) -> [String: Int] {
        var counts: [String: Int] = [:]
        for (stage, value) in figures?["counts"]?.objectValue ?? [:] { counts[stage] = Int(value.numberValue?.int64Value ?? -1) }
        return counts
    }

    /// An item and orders `orders/1`…`orders/{count}` on it, all received.
    func placeOrders(_ count: Int, _ client: SyncClient) throws {
        try client.ok(#"{"op":"set","name":"items/drill","data":{"stock":100}}"#)
        for n in 1...count { try client.ok(#"{"op":"set","name":"orders/\#(n)","data":{"item":"items/drill","qty":1}}"#) }
    }

    @Test func aRestartReadsTheStatsBackWithoutRecounting() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try placeOrders(6, client)
            try client.ok(#"{"op":"advance","name":"orders/1","to":"in-progress"}"#)
            try client.ok(#"{"op":"advance","name":"orders/2","to":"cancelled"}"#)
            for stage in ["in-progress", "ready", "delivered"] {
                try client.ok(#"{"op":"advance","name":"orders/3","to":"\#(stage)"}"#)
            }
            #expect(recounts(hub) == 1, "a fresh store has no stats record: counted once (nothing to count)")
        }
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"orders/7","data":{"item":"items/drill","qty":1}}"#)
            try client.ok(#"{"op":"advance","name":"orders/4","to":"cancelled"}"#)
            try client.ok(#"{"op":"advance","name":"orders/1","to":"ready"}"#)
            #expect(recounts(hub) == 0, "the stats were read back, not recounted")
            let stats = try figures(client)
            #expect(counts(stats) == ["received": 3, "in-progress": 0, "ready": 1, "delivered": 1, "cancelled": 2])
            #expect(stats?["total"] == 7)
            #expect(stats?["oldestOpen"]?["name"] == "orders/1")
            // The oldest open order closes: the next oldest comes from the
            // open orders read back from the list.
            try client.ok(#"{"op":"advance","name":"orders/1","to":"cancelled"}"#)
            #expect(try figures(client)?["oldestOpen"]?["name"] == "orders/5")
            #expect(recounts(hub) == 0)
        }
        // A recount (a config with one more stage, which the stats record
        // does not name) gives the figures the hub carried on with.
        let carried = try withHub(dataDirectory: directory.path) { hub in try figures(try hub.connect()) }
        try withHub(dataDirectory: directory.path, { configuration in
            var orders = Workflow.orders
            orders.stages.insert("checked", at: 3)
            orders.transitions["ready"] = ["checked", "delivered", "cancelled"]
            orders.transitions["checked"] = ["delivered", "cancelled"]
            configuration.core.planner = WorkflowPlanner(workflows: WorkflowSet([orders, .intake]))
        }) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"orders/8","data":{"item":"items/drill","qty":1}}"#)
            #expect(recounts(hub) == 1, "a stats record that does not fit the workflow is recounted")
            var stats = try figures(client)?.objectValue ?? [:]
            var expected = carried?.objectValue ?? [:]
            #expect(counts(.object(stats))["checked"] == 0 && counts(.object(stats))["received"] == 4)
            // Apart from the new stage and the new order, as before.
            for key in ["counts", "stageTime", "total"] { stats[key] = nil; expected[key] = nil }
            #expect(stats == expected)
        }
    }

    /// The open orders are read through the stage index, not the
    /// workflow's list: a list an admin edited by hand changes nothing.
    @Test func aListEditedByHandDoesNotMisleadTheStats() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try placeOrders(3, client)
            // An admin takes an open order off the list by hand.
            try client.ok(#"{"op":"removeEntry","list":"orders","entry":"orders/2"}"#)
        }
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"advance","name":"orders/1","to":"cancelled"}"#)
            #expect(recounts(hub) == 0)
            let stats = try figures(client)
            #expect(counts(stats)["received"] == 2 && counts(stats)["cancelled"] == 1)
            #expect(stats?["oldestOpen"]?["name"] == "orders/2", "the index still has the order the list lost")
        }
    }
}
