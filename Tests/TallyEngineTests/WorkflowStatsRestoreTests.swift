import Testing
@testable import TallyEngine
import TallyProtocol

/// Reading a workflow's stats back from its stats record and its open
/// records, as the hub does after a restart instead of recounting
/// every record the workflow ever had (issue 14, point 4).
@Suite("Workflow stats read back from the stats record")
struct WorkflowStatsRestoreTests {
    /// A harness with orders in every stage, deleted ones included.
    func busyHub() throws -> WorkflowHarness {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 1_000_000]))], as: admin)
        for n in 0..<40 {
            try hub.apply([Write(name: "orders/\(n)", action: .set(order(qty: 1)))], as: staff)
            for _ in 0..<(n % 5) { _ = hub.error([advance("orders/\(n)")], as: admin) }
            if n % 7 == 3 { _ = hub.error([advance("orders/\(n)", to: "cancelled")], as: staff) }
            if n % 11 == 5 { try hub.apply([Write(name: "orders/\(n)", action: .delete)], as: admin) }
        }
        return hub
    }

    /// The open records, as the hub reads them through the stage index.
    func open(_ hub: WorkflowHarness) -> [WorkflowStats.OpenRecord] {
        hub.state.records.values
            .filter { $0.name.hasPrefix("orders/") && Workflow.orders.isOpen($0.data["stage"]?.stringValue ?? "delivered") }
            .map { WorkflowStats.OpenRecord(name: $0.name, created: $0.created) }
    }

    func recount(_ hub: WorkflowHarness) -> WorkflowStats {
        var fresh = WorkflowStats(workflow: .orders)
        for record in hub.state.records.values where record.name.hasPrefix("orders/") { fresh.count(record, in: .orders) }
        return fresh
    }

    /// Figures as published: the stats record's data without `updated`.
    func published(_ stats: WorkflowStats, after delta: WorkflowStats.Delta = .init()) -> JSONObject {
        var data = stats.record(after: delta, now: 0)
        data["updated"] = nil
        return data
    }

    @Test func theStatsRecordAndTheOpenRecordsGiveWhatARecountGives() throws {
        let hub = try busyHub()
        let record = try #require(hub.data("stats/orders"))
        let restored = try #require(WorkflowStats(restoring: record, open: open(hub), workflow: .orders))
        let counted = recount(hub)
        #expect(published(restored) == published(counted))
        #expect(restored.total == counted.total && restored.oldest == counted.oldest)

        // And they go on alike: closing the oldest open order makes both
        // find the next oldest among the open ones they hold.
        let oldest = try #require(counted.oldest)
        var delta = WorkflowStats.Delta()
        delta.leave("received")
        delta.enter("cancelled")
        delta.closed.insert(ByteKey(oldest.name))
        #expect(published(restored, after: delta) == published(counted, after: delta))
        var movedRestored = restored, movedCounted = counted
        movedRestored.apply(delta)
        movedCounted.apply(delta)
        #expect(movedRestored.oldest == movedCounted.oldest && movedRestored.oldest != nil)
        #expect(movedRestored.oldest?.name != oldest.name)
    }

    @Test func aHubThatCarriesOnWithReadBackStatsKeepsThemEqualToARecount() throws {
        let hub = try busyHub()
        // As after a restart: the stats the hub goes on with are read back.
        let record = try #require(hub.data("stats/orders"))
        let restored = try #require(WorkflowStats(restoring: record, open: open(hub), workflow: .orders))
        hub.stats["orders/"] = restored
        for n in 0..<20 {
            _ = hub.error([advance("orders/\(n)")], as: admin)
            try hub.apply([Write(name: "orders/new\(n)", action: .set(order(qty: 1)))], as: staff)
        }
        #expect(published(try #require(hub.stats["orders/"])) == published(recount(hub)))
        var data = try #require(hub.data("stats/orders"))
        data["updated"] = nil
        #expect(data == published(recount(hub)))
    }

    static func spoil(_ data: inout JSONObject, _ why: String) {
        var counts = data["counts"]?.objectValue ?? [:]
        var times = data["stageTime"]?.objectValue ?? [:]
        switch why {
        case "a stage missing": counts = JSONObject(counts.filter { $0.key != "ready" })
        case "a stage the workflow does not have": counts["lost"] = 0
        case "a negative count": counts["delivered"] = -1
        case "a total that is not the sum": data["total"] = 1_000
        case "a stage time that is not a number": times["received"] = .object(["totalMs": "long", "exits": 1])
        default: break
        }
        data["counts"] = .object(counts)
        data["stageTime"] = .object(times)
        if why == "no counts" { data["counts"] = nil }
    }

    @Test(arguments: ["a stage missing", "a stage the workflow does not have", "a negative count",
                      "a total that is not the sum", "no counts", "a stage time that is not a number"])
    func aRecordThatDoesNotFitIsNotReadBack(_ why: String) throws {
        let hub = try busyHub()
        var record = try #require(hub.data("stats/orders"))
        #expect(WorkflowStats(restoring: record, open: open(hub), workflow: .orders) != nil)
        Self.spoil(&record, why)
        #expect(WorkflowStats(restoring: record, open: open(hub), workflow: .orders) == nil, "\(why)")
    }

    @Test func openRecordsThatDoNotMatchTheCountsAreNotReadBack() throws {
        let hub = try busyHub()
        let record = try #require(hub.data("stats/orders"))
        let listed = open(hub)
        #expect(listed.count > 2)
        #expect(WorkflowStats(restoring: record, open: Array(listed.dropLast()), workflow: .orders) == nil)
        #expect(WorkflowStats(restoring: record, open: listed + [listed[0]], workflow: .orders) == nil)
        var twice = listed
        twice[1] = twice[0]
        #expect(WorkflowStats(restoring: record, open: twice, workflow: .orders) == nil, "a name listed twice")
        // A config that makes a stage terminal changes which records are open.
        var changed = Workflow.orders
        changed.terminal.insert("ready")
        let counts = try #require(record["counts"]?.objectValue)
        if counts["ready"] != 0 {
            #expect(WorkflowStats(restoring: record, open: listed, workflow: changed) == nil)
        }
    }
}
