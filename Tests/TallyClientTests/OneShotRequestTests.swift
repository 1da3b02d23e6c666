import Testing
import TallyClient
import TallyHubTestSupport
import TallyProtocol
import TallyServer
import TallyTestSupport

/// The requests the one-shot commands send (`tally set`, `order`,
/// `resolve`), against a hub in this process.
@Suite("One-shot requests", .serialized)
struct OneShotRequestTests {
    @Test func askAndWriteReturnTheReplyWithoutIdAndOk() throws {
        let hub = try RestartableHub.temporary(prefix: "oneshot-hub")
        let access = HubAccess(server: hub.url)
        let written = try BlockingTallyClient.write(access, .set("notes/1", data: ["text": "a"], version: 0), idem: "k1")
        #expect(written["id"] == nil && written["ok"] == nil && written["version"] == .int(1))
        let again = try BlockingTallyClient.write(access, .set("notes/1", data: ["text": "a"], version: 0), idem: "k1")
        #expect(again["version"] == .int(1) && again["seq"] == written["seq"], "a retry with the key applies once")
        let read = try BlockingTallyClient.ask(access, ["op": "get", "name": "notes/1"])
        #expect(read["data"] == ["text": "a"] && read["id"] == nil && read["ok"] == nil)
        #expect(throws: HubError.self) { try BlockingTallyClient.write(access, .set("notes/1", data: [:], version: 0)) }
    }

    @Test func anOrderIsCreatedOnceThenAdvancedAndListedByStage() throws {
        let hub = try RestartableHub.temporary(prefix: "oneshot-hub")
        let access = HubAccess(server: hub.url)
        #expect(OrderRequests.name("drill-01", under: "items/") == "items/drill-01")
        #expect(OrderRequests.name("items/drill-01", under: "items/") == "items/drill-01")
        let name = OrderRequests.newName()
        #expect(name.hasPrefix("orders/") && name.count == 23 && name != OrderRequests.newName())
        _ = try BlockingTallyClient.write(access, .set("items/drill-01", data: ["stock": 5]))
        _ = try BlockingTallyClient.write(access, OrderRequests.create(name, item: "items/drill-01", qty: 2, kind: "issue"))
        #expect(throws: HubError.self, "version 0: create only") {
            try BlockingTallyClient.write(access, OrderRequests.create(name, item: "items/drill-01", qty: 2, kind: "issue"))
        }
        let moved = try BlockingTallyClient.write(access, .advance(name, to: "in-progress"))
        #expect(moved["from"] == "received" && moved["to"] == "in-progress")
        func listed(_ stages: [String]?) throws -> [String] {
            let client = try BlockingTallyClient(access: access)
            defer { client.close() }
            var names: [String] = []
            try client.forEachPage(OrderRequests.list(stages: stages)) { names += $0.compactMap { $0["name"]?.stringValue } }
            return names
        }
        #expect(try listed(["in-progress"]) == [name])
        #expect(try listed(["received"]).isEmpty)
        #expect(try listed(nil) == [name])
    }

    @Test func aCodeResolvesToItsItemOrTheNameANewOneWouldGet() throws {
        let hub = try RestartableHub.temporary(prefix: "oneshot-hub")
        let access = HubAccess(server: hub.url)
        _ = try BlockingTallyClient.write(access, .set("items/widget-1", data: ["sku": "SKU-9", "name": "Widget"]))
        guard case .found(let item, let body) = try CodeResolution.resolve("SKU-9", access: access) else {
            Issue.record("SKU-9 not found")
            return
        }
        #expect(item == "items/widget-1" && body["record"]?["data"]?["name"] == "Widget")
        guard case .unknown(let suggested, _) = try CodeResolution.resolve("NEW CODE/1", access: access) else {
            Issue.record("an unknown code was found")
            return
        }
        #expect(suggested == "items/NEW-CODE-1")
    }
}
