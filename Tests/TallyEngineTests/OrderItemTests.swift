import Testing
@testable import TallyEngine
import TallyProtocol

private func create(_ name: String, _ data: JSONObject, checkStock: Bool = false) -> Write {
    var write = Write(name: name, action: .set(data))
    write.checkStock = checkStock
    return write
}

@Suite("Orders: checkStock on creation")
struct OrderCheckStockTests {
    @Test func anIssueOrderOverStockIsRefusedOnlyWhenAsked() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/bolt", action: .set(["stock": 3]))], as: admin)
        let refused = hub.error([create("orders/big", order("items/bolt", qty: 5), checkStock: true)], as: staff)
        #expect(refused?.code == .insufficientStock)
        #expect(refused?.details["item"] == "items/bolt" && refused?.details["stock"] == 3 && refused?.details["needed"] == 5)
        #expect(hub.data("orders/big") == nil)
        // Without checkStock the order is made, as before (delivery checks).
        try hub.apply([create("orders/big", order("items/bolt", qty: 5))], as: staff)
        // Within the stock, and receive orders, pass.
        try hub.apply([create("orders/ok", order("items/bolt", qty: 3), checkStock: true)], as: staff)
        try hub.apply([create("orders/in", order("items/bolt", qty: 50, kind: "receive"), checkStock: true)], as: staff)
        // An item without stock has none.
        try hub.apply([Write(name: "items/empty", action: .set(["name": "empty"]))], as: admin)
        #expect(hub.error([create("orders/e", order("items/empty", qty: 1), checkStock: true)], as: staff)?.details["stock"] == 0)
        // On an existing order it changes nothing (it checks creations).
        try hub.apply([create("orders/ok", order("items/bolt", qty: 9), checkStock: true)], as: staff)
        #expect(hub.data("orders/ok")?["qty"] == 9)
    }

    @Test func inAnAtomicWriteTheEarlierWritesCount() throws {
        let hub = WorkflowHarness()
        let refused = hub.error([Write(name: "items/nut", action: .set(["stock": 1])),
                                 create("orders/n", order("items/nut", qty: 2), checkStock: true)], as: admin, atomic: true)
        #expect(refused?.code == .insufficientStock && refused?.details["index"] == 1 && refused?.details["stock"] == 1)
        try hub.apply([Write(name: "items/nut", action: .set(["stock": 1])),
                       Write(name: "items/nut", action: .increment(try RecordPath(parsing: "stock"), by: JSONNumber(1))),
                       create("orders/n", order("items/nut", qty: 2), checkStock: true)], as: admin, atomic: true)
        #expect(hub.stage("orders/n") == "received")
    }

    @Test func checkStockOutsideAnOrderWorkflowIsABadField() throws {
        let hub = WorkflowHarness()
        let error = hub.error([create("notes/1", ["qty": 1], checkStock: true)], as: admin)
        #expect(error?.code == .badField && error?.details["field"] == "checkStock")
        let intake = hub.error([create("intake/1", [:], checkStock: true)], as: admin)
        #expect(intake?.code == .badField && intake?.details["field"] == "checkStock")
    }

    @Test func decoding() throws {
        func decoded(_ text: String) throws -> Request { try Request.decode(try JSONValue.parse(Array(text.utf8))) }
        let request = try decoded(#"{"op":"set","name":"orders/1","data":{},"checkStock":true}"#)
        guard case .write(let writes, _) = request.operation else { Issue.record("not a write"); return }
        #expect(writes[0].checkStock)
        let inWrite = try decoded(#"{"op":"write","ops":[{"op":"set","name":"orders/1","data":{},"checkStock":true}]}"#)
        guard case .write(let ops, _) = inWrite.operation else { Issue.record("not a write"); return }
        #expect(ops[0].checkStock)
        for bad in [#"{"op":"set","name":"orders/1","data":{},"checkStock":"yes"}"#,
                    #"{"op":"set","name":"orders/1","path":"qty","value":2,"checkStock":true}"#] {
            #expect(throws: ProtocolError.self) { try decoded(bad) }
            do { _ = try decoded(bad) } catch let error as ProtocolError { #expect(error.details["field"] == "checkStock") }
        }
    }
}

@Suite("Orders: the item must exist")
struct OrderItemExistsTests {
    @Test func anOrderForAMissingItemIsRefusedWhenMade() throws {
        let hub = WorkflowHarness()
        let error = hub.error([Write(name: "orders/typo", action: .set(order("items/drlil-01")))], as: staff)
        #expect(error?.code == .notFound)
        #expect(error?.details["item"] == "items/drlil-01")
        #expect(error?.message.contains("items/drlil-01") == true && error?.message.contains("create the item") == true)
        #expect(hub.data("orders/typo") == nil && hub.data("stats/orders") == nil)
        // A receive order too: stock cannot come in to nothing.
        #expect(hub.error([Write(name: "orders/in", action: .set(order("items/drlil-01", kind: "receive")))], as: staff)?.code == .notFound)
    }

    @Test func inAnAtomicWriteTheItemMayBeMadeFirst() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/new", action: .set(["stock": 1])),
                       Write(name: "orders/1", action: .set(order("items/new")))], as: admin, atomic: true)
        #expect(hub.stage("orders/1") == "received")
        // Made at a path counts too; deleted before the order does not.
        try hub.apply([Write(name: "items/p", action: .setPath(try RecordPath(parsing: "stock"), 2)),
                       Write(name: "orders/2", action: .set(order("items/p")))], as: admin, atomic: true)
        let error = hub.error([Write(name: "items/new", action: .delete),
                               Write(name: "orders/3", action: .set(order("items/new")))], as: admin, atomic: true)
        #expect(error?.code == .notFound && error?.details["index"] == 1 && error?.details["item"] == "items/new")
        // The order first and the item after it: refused.
        let late = hub.error([Write(name: "orders/4", action: .set(order("items/late"))),
                              Write(name: "items/late", action: .set(["stock": 1]))], as: admin, atomic: true)
        #expect(late?.code == .notFound && late?.details["index"] == 0)
    }

    @Test func aPlainWriteMayNotPointAnOrderAtAMissingItem() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 10]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .set(order()))], as: staff)
        let item = try RecordPath(parsing: "item")
        let refusals: [Write] = [
            Write(name: "orders/1", action: .set(order("items/gone"))),
            Write(name: "orders/1", action: .merge(["item": "items/gone"])),
            Write(name: "orders/1", action: .setPath(item, "items/gone")),
            Write(name: "orders/1", action: .advance(Advance(data: ["item": "items/gone"]))),
        ]
        for write in refusals {
            let error = hub.error([write], as: staff)
            #expect(error?.code == .notFound && error?.details["item"] == "items/gone", "\(write.action)")
        }
        #expect(hub.data("orders/1")?["item"] == "items/drill" && hub.stage("orders/1") == "received")
        // To an item that exists: fine.
        try hub.apply([Write(name: "items/saw", action: .set(["stock": 10]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .merge(["item": "items/saw"]))], as: staff)
    }

    @Test func anItemDeletedLaterLeavesTheOrderEditableAndFailsItsDelivery() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 10]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .set(order()))], as: staff)
        try hub.apply([Write(name: "items/drill", action: .delete)], as: admin)
        // Its item is not looked up again while it stays the same.
        try hub.apply([Write(name: "orders/1", action: .merge(["qty": 3]))], as: staff)
        try hub.apply([advance("orders/1")], as: staff)
        try hub.apply([advance("orders/1")], as: staff)
        #expect(hub.error([advance("orders/1", to: "delivered")], as: staff)?.code == .notFound)
        try hub.apply([advance("orders/1", to: "cancelled")], as: staff)
    }
}
