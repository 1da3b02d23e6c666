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
