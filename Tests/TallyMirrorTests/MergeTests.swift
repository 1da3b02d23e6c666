import Testing
import TallyClient
@testable import TallyMirror
import TallyProtocol

func object(_ text: String) -> JSONObject { (try? JSONValue.parse(text))?.objectValue ?? [:] }

@Suite struct ThreeWayMergeTests {
    let orders = WorkflowCatalog.shipped.rule(for: "orders/1")!

    @Test func fieldsChangedOnOneSideMergeCleanly() {
        let base = object(#"{"title":"t0","qty":1,"color":"red"}"#)
        let op: JSONObject = ["op": "set", "name": "n/1", "path": "qty", "value": 2]
        let hub = object(#"{"title":"t0","qty":1,"color":"blue"}"#)
        let outcome = ThreeWayMerge.merge(name: "n/1", op: op, base: base, hub: hub, hubVersion: 4, rule: nil, policy: .hub)
        #expect(outcome.conflicts.isEmpty)
        #expect(outcome.merged == object(#"{"title":"t0","qty":2,"color":"blue"}"#))
        #expect(outcome.steps == [["op": "set", "name": "n/1", "data": .object(outcome.merged!), "version": 4]])
    }

    @Test func fieldsChangedOnBothSidesFollowThePolicy() {
        let base = object(#"{"title":"t0","qty":1}"#)
        let op: JSONObject = ["op": "set", "name": "n/1", "path": "title", "value": "mine"]
        let hub = object(#"{"title":"theirs","qty":1}"#)
        let keepHub = ThreeWayMerge.merge(name: "n/1", op: op, base: base, hub: hub, hubVersion: 2, rule: nil, policy: .hub)
        #expect(keepHub.steps.isEmpty && keepHub.conflicts.isEmpty && keepHub.merged == hub)
        let client = ThreeWayMerge.merge(name: "n/1", op: op, base: base, hub: hub, hubVersion: 2, rule: nil, policy: .client)
        #expect(client.merged?["title"] == "mine" && client.steps.count == 1)
        let both = ThreeWayMerge.merge(name: "n/1", op: op, base: base, hub: hub, hubVersion: 2, rule: nil, policy: .both)
        #expect(both.merged == hub && both.steps.isEmpty)
        #expect(both.conflicts == [FieldConflict(field: "title", local: "mine", hub: "theirs", base: "t0")])
    }

    @Test func aDeleteAgainstAnEditIsDecidedForTheRecordAsAWhole() {
        let base = object(#"{"a":1}"#)
        let delete: JSONObject = ["op": "delete", "name": "n/1"]
        let hub = object(#"{"a":2}"#)
        #expect(ThreeWayMerge.merge(name: "n/1", op: delete, base: base, hub: hub, hubVersion: 3, rule: nil, policy: .hub).steps.isEmpty)
        #expect(ThreeWayMerge.merge(name: "n/1", op: delete, base: base, hub: hub, hubVersion: 3, rule: nil, policy: .client).steps
            == [["op": "delete", "name": "n/1", "version": 3]])
        let both = ThreeWayMerge.merge(name: "n/1", op: delete, base: base, hub: hub, hubVersion: 3, rule: nil, policy: .both)
        #expect(both.conflicts.map(\.field) == ["*"] && both.steps.isEmpty)
        // The hub deleted what was only edited here: recreated only under `client`.
        let edit: JSONObject = ["op": "set", "name": "n/1", "path": "a", "value": 5]
        #expect(ThreeWayMerge.merge(name: "n/1", op: edit, base: base, hub: nil, hubVersion: 0, rule: nil, policy: .hub).steps.isEmpty)
        #expect(ThreeWayMerge.merge(name: "n/1", op: edit, base: base, hub: nil, hubVersion: 0, rule: nil, policy: .client).steps
            == [["op": "set", "name": "n/1", "data": ["a": 5], "version": 0]])
    }

    @Test func aWriteTheHubAlreadyHoldsSendsNothing() {
        let base = object(#"{"a":1}"#)
        let op: JSONObject = ["op": "set", "name": "n/1", "path": "a", "value": 2]
        let outcome = ThreeWayMerge.merge(name: "n/1", op: op, base: base, hub: object(#"{"a":2}"#), hubVersion: 7, rule: nil, policy: .both)
        #expect(outcome.steps.isEmpty && outcome.conflicts.isEmpty)
    }

    @Test func stagesNeverMoveBackwardsAndOnlyAlongLegalTransitions() {
        func advance(_ from: String, _ to: String) -> JSONObject { ["op": "advance", "name": "orders/1", "from": .string(from), "to": .string(to)] }
        // The hub is already where this mirror wanted to go, or further: nothing to send.
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("received", "in-progress"), hubStage: "in-progress", rule: orders).isEmpty)
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("received", "in-progress"), hubStage: "ready", rule: orders).isEmpty)
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("in-progress", "ready"), hubStage: "cancelled", rule: orders).isEmpty)
        // Further along and reachable from the hub's stage: advance from there.
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("received", "cancelled"), hubStage: "ready", rule: orders)
            == [advance("ready", "cancelled")])
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("in-progress", "ready"), hubStage: "received", rule: orders)
            == [advance("received", "in-progress"), advance("in-progress", "ready")])
        // Terminal stages stay.
        #expect(ThreeWayMerge.mergeStage(name: "orders/1", op: advance("ready", "cancelled"), hubStage: "delivered", rule: orders).isEmpty)
    }

    @Test func workflowFieldsTheHubKeepsAreNeverWrittenByAMerge() {
        let base = object(#"{"item":"items/a","qty":1,"stage":"received","history":[1],"owner":"ana","note":"x"}"#)
        let op: JSONObject = ["op": "set", "name": "orders/1", "path": "note", "value": "y"]
        let hub = object(#"{"item":"items/a","qty":2,"stage":"in-progress","history":[1,2],"owner":"ana","note":"x"}"#)
        let outcome = ThreeWayMerge.merge(name: "orders/1", op: op, base: base, hub: hub, hubVersion: 3, rule: orders, policy: .hub)
        #expect(outcome.steps == [["op": "set", "name": "orders/1", "data": .object(object(#"{"item":"items/a","qty":2,"note":"y"}"#)), "version": 3]])
        #expect(outcome.merged?["stage"] == "in-progress")
    }
}

@Suite struct WorkflowRuleTests {
    let orders = WorkflowCatalog.shipped.rule(for: "orders/1")!

    @Test func pathsFollowTransitions() {
        #expect(orders.path(from: "received", to: "ready") == ["in-progress", "ready"])
        #expect(orders.path(from: "ready", to: "received") == nil)
        #expect(orders.path(from: "delivered", to: "cancelled") == nil)
        #expect(orders.furthest(local: "cancelled", hub: "ready") == "cancelled")
        #expect(orders.furthest(local: "in-progress", hub: "cancelled") == "cancelled")
        #expect(WorkflowCatalog.shipped.rule(for: "orders") == nil)
        #expect(WorkflowCatalog.shipped.rule(for: "intake/7f")?.stages.first == "queued")
    }

    @Test func theHubsDescriptionRoundTrips() {
        let parsed = WorkflowCatalog(json: WorkflowCatalog.shipped.json)
        #expect(parsed == WorkflowCatalog.shipped)
    }
}

@Suite struct LocalWritePlannerTests {
    let orders = WorkflowCatalog.shipped.rule(for: "orders/1")!
    let order = object(#"{"item":"items/a","qty":1,"stage":"received","history":[],"owner":"ana"}"#)

    @Test func aStageWriteBecomesACheckedAdvance() throws {
        let writes = try LocalWritePlanner.writes(for: .set(name: "orders/1", path: "stage", value: "in-progress"), current: order, rule: orders)
        #expect(writes == [["op": "advance", "name": "orders/1", "from": "received", "to": "in-progress"]])
        #expect(throws: ProtocolError.self) {
            try LocalWritePlanner.writes(for: .set(name: "orders/1", path: "stage", value: "delivered"), current: order, rule: orders)
        }
        #expect(throws: ProtocolError.self) {
            try LocalWritePlanner.writes(for: .set(name: "orders/1", path: "history", value: []), current: order, rule: orders)
        }
    }

    @Test func aWholeRecordWithANewStageIsAnAdvanceThenASet() throws {
        var data = order
        data["stage"] = "in-progress"
        data["qty"] = 3
        let writes = try LocalWritePlanner.writes(for: .set(name: "orders/1", path: nil, value: .object(data)), current: order, rule: orders)
        #expect(writes.map { $0["op"] } == ["advance", "set"])
        #expect(writes[1]["data"] == .object(object(#"{"item":"items/a","qty":3}"#)))
        let applied = writes.reduce(Optional(order)) { LocalEffect.apply($1, to: $0, rule: orders) }
        #expect(applied?["stage"] == "in-progress" && applied?["qty"] == 3 && applied?["owner"] == "ana")
    }

    @Test func hubKeptRecordsAndMissingValuesAreRefusedLocally() {
        #expect(throws: ProtocolError.self) {
            try LocalWritePlanner.writes(for: .set(name: "stats/orders", path: "total", value: 1), current: nil, rule: nil)
        }
        #expect(throws: ProtocolError.self) {
            try LocalWritePlanner.writes(for: .delete(name: "n/1", path: "missing"), current: ["a": 1], rule: nil)
        }
        #expect(throws: ProtocolError.self) {
            try LocalWritePlanner.writes(for: .delete(name: "n/1", path: nil), current: nil, rule: nil)
        }
    }
}

@Suite struct MirrorNamesTests {
    /// A conflict's id and a mirror's client id are stable across versions
    /// (a conflict recorded again after a crash must get the same id).
    @Test func conflictAndClientIDsAreStable() {
        #expect(MirrorSync.conflictID("mirror-abc", "qty") == "0f442806897b330b")
        #expect(MirrorSync.hashHex("/tmp/m.sqlite", digits: 12) == "f84786c3dd5d")
        #expect(MirrorSync.clientID(store: "/nonexistent/wtc/m.sqlite").hasSuffix(":" + MirrorSync.hashHex("/nonexistent/wtc/m.sqlite", digits: 12)))
    }
}
