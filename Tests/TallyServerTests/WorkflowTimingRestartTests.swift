import Testing
import TallyEngine
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

/// The stage timing in `stats/orders` (issue 17, point 4) across a
/// restart: the waits come back from the open records the hub reads
/// through the stage index (their stages and entry times), the hours from
/// the stats record, and nothing is recounted.
@Suite("Workflow stage timing across a restart")
struct WorkflowTimingRestartTests {
    func stats(_ client: SyncClient) throws -> JSONObject {
        try #require(try client.ok(#"{"op":"get","name":"stats/orders"}"#)["data"]?.objectValue)
    }

    /// When each order entered its stage, from the hub's own records.
    func entered(_ client: SyncClient, _ names: [String]) throws -> [String: (stage: String, time: Int64)] {
        var found: [String: (String, Int64)] = [:]
        for name in names {
            let data = try #require(try client.ok(#"{"op":"get","name":"\#(name)"}"#)["data"]?.objectValue)
            let last = try #require(data["history"]?.arrayValue?.last)
            found[name] = (data["stage"]?.stringValue ?? "", last["time"]?.numberValue?.int64Value ?? -1)
        }
        return found
    }

    func sum(_ hours: JSONValue?) -> Int64 {
        (hours?.arrayValue ?? []).reduce(0) { $0 + ($1.numberValue?.int64Value ?? 0) }
    }

    @Test func theWaitsAndTheHoursComeBackWithoutARecount() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"items/drill","data":{"stock":100}}"#)
            for n in 1...4 { try client.ok(#"{"op":"set","name":"orders/\#(n)","data":{"item":"items/drill","qty":1}}"#) }
            try client.ok(#"{"op":"advance","name":"orders/1","to":"in-progress"}"#)
            try client.ok(#"{"op":"advance","name":"orders/2","to":"cancelled"}"#)
            for stage in ["in-progress", "ready", "delivered"] {
                try client.ok(#"{"op":"advance","name":"orders/3","to":"\#(stage)"}"#)
            }
        }
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"orders/5","data":{"item":"items/drill","qty":1}}"#)
            try client.ok(#"{"op":"advance","name":"orders/4","to":"in-progress"}"#)
            #expect(hub.hub.core.metrics.statsRecounts.load(ordering: .relaxed) == 0, "read back, not recounted")
            let data = try stats(client)
            let orders = try entered(client, (1...5).map { "orders/\($0)" })
            for stage in ["received", "in-progress", "ready"] {
                let here = orders.values.filter { $0.stage == stage }.map(\.time)
                let expected: JSONValue? = here.isEmpty ? nil : .number(JSONNumber(here.reduce(0, +)))
                #expect(data["stageTime"]?[stage]?["enteredSum"] == expected, "\(stage)")
            }
            #expect(sum(data["finished"]?["delivered"]) == 1 && sum(data["finished"]?["cancelled"]) == 1)
            let newest = max(orders["orders/2"]!.time, orders["orders/3"]!.time)
            #expect(data["finished"]?["hour"] == .number(JSONNumber(WorkflowStats.hour(of: newest))))
        }
    }
}
