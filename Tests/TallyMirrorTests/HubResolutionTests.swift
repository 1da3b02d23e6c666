import Testing
import TallyClient
@testable import TallyMirror
import TallyProtocol
import TallyTestSupport

@Suite struct HubResolutionReadingTests {
    let mine = "mirror:scanner-3:5f0c2a91b7e4"

    func record(_ extra: JSONObject) -> JSONObject {
        var record: JSONObject = ["name": "notes/c", "field": "title", "local": "from-B", "hub": "from-A", "base": "t0",
                                  "policy": "both", "created": 1, "resolved": false, "mirror": .string(mine)]
        for (key, value) in extra { record[key] = value }
        return record
    }

    @Test func aResolutionNamesTheSideTaken() {
        #expect(HubResolution(record: record([:]), mirror: mine) == .open)
        #expect(HubResolution(record: record(["resolved": true, "take": "local"]), mirror: mine) == .take(.client))
        #expect(HubResolution(record: record(["resolved": true, "take": "hub", "resolvedBy": "ana"]), mirror: mine) == .take(.hub))
        // A side chosen but not (yet) marked resolved is still open.
        #expect(HubResolution(record: record(["take": "local"]), mirror: mine) == .open)
    }

    @Test func anotherMirrorsConflictOrAnUnreadableTakeIsIgnored() {
        let other = HubResolution(record: record(["resolved": true, "take": "local", "mirror": "mirror:other:1"]), mirror: mine)
        guard case .ignored(let why) = other else { Issue.record("\(other)"); return }
        #expect(why.contains("mirror:other:1"))
        for take: JSONValue in ["sideways", 1, .null] {
            guard case .ignored(let why) = HubResolution(record: record(["resolved": true, "take": take]), mirror: mine) else {
                Issue.record("take \(take) was acted on")
                continue
            }
            #expect(why.contains("local"))
        }
        if case .ignored = HubResolution(record: record(["resolved": true]), mirror: mine) {} else {
            Issue.record("a resolution without take was acted on")
        }
        if case .ignored = HubResolution(record: nil, mirror: mine) {} else { Issue.record("a deleted record was acted on") }
    }

    @Test func theHubHoldsTheLocalValueOfAFieldOrAWholeRecord() {
        func conflict(_ field: String, local: JSONValue?) -> ConflictRecord {
            ConflictRecord(id: "c1", name: "orders/o1", field: field, local: local, hub: nil, base: nil, policy: "both",
                           created: 0, resolved: nil)
        }
        #expect(conflict("title", local: "mine").isHeld(by: ["title": "mine", "qty": 1], rule: nil))
        #expect(!conflict("title", local: "mine").isHeld(by: ["title": "theirs"], rule: nil))
        #expect(!conflict("title", local: "mine").isHeld(by: nil, rule: nil))
        // The local side removed the field: held when the hub has none.
        #expect(conflict("title", local: nil).isHeld(by: ["qty": 1], rule: nil))
        #expect(!conflict("title", local: nil).isHeld(by: ["title": "x"], rule: nil))
        // A local null is shown as null on the hub, which a resolver takes as "delete the field".
        #expect(conflict("title", local: .null).isHeld(by: ["qty": 1], rule: nil))
        #expect(conflict("title", local: nil).isHeld(by: ["title": .null], rule: nil))
        // The whole record: deleted on the local side, or equal but for what the workflow keeps.
        let orders = WorkflowCatalog.shipped.rule(for: "orders/o1")
        #expect(conflict("*", local: nil).isHeld(by: nil, rule: orders))
        #expect(!conflict("*", local: nil).isHeld(by: ["qty": 1], rule: orders))
        let local = conflict("*", local: ["qty": 2, "stage": "received"])
        #expect(local.isHeld(by: ["qty": 2, "stage": "ready", "history": []], rule: orders))
        #expect(!local.isHeld(by: ["qty": 3, "stage": "received"], rule: orders))
        #expect(!local.isHeld(by: nil, rule: orders))
    }
}

// A conflict recorded by a mirror and resolved on the hub (as the dashboard
// or REST does it) is closed by the mirror's run, which writes its value
// only when the hub does not hold it already.
@Suite(.serialized) struct HubResolutionTests {
    @Test func conflictsResolvedOnTheHubAreClosedByTheMirrorThatRecordedThem() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        let names = ["notes/merge", "notes/atomic", "notes/hub"]
        for name in names { _ = try await checker.set(name, data: ["title": "t0", "qty": 1]) }
        let policies = PolicyTable(["notes/": .both])
        let a = try TestMirror(patterns: ["notes/"], policies: policies)
        let b = try TestMirror(patterns: ["notes/"], policies: policies)
        for mirror in [a, b] { try await mirror.syncOnce(hub.url, holding: names) }
        for name in names {
            _ = try a.store.write(.set(name: name, path: "title", value: "from-A"))
            _ = try b.store.write(.set(name: name, path: "title", value: "from-B"))
        }
        try a.start(hub.url)
        try await a.waitConverged()
        try b.start(hub.url)
        try await b.waitConverged()
        let conflicts = try b.store.conflicts()
        #expect(Set(conflicts.map(\.name)) == Set(names))
        func id(_ name: String) throws -> String { try #require(conflicts.first { $0.name == name }).id }
        func closed(_ name: String) throws -> String? { try b.store.conflict(try id(name))?.resolved }

        // take=local by a merge (REST PATCH): the mirror writes its value.
        _ = try await checker.merge("conflicts/\(try id("notes/merge"))", patch: ["resolved": true, "take": "local"])
        // take=local by one atomic write that also sets the value (the dashboard): nothing more to write.
        let atomic = try await checker.write(atomic: [
            .set("notes/atomic", path: "title", value: "from-B"),
            .set("conflicts/\(try id("notes/atomic"))", path: "resolved", value: true),
            .set("conflicts/\(try id("notes/atomic"))", path: "take", value: "local"),
        ])
        // take=hub: nothing to write.
        let hubSide = try await checker.merge("conflicts/\(try id("notes/hub"))", patch: ["resolved": true, "take": "hub"])

        try await waitFor("the mirror to close the three conflicts") {
            try closed("notes/merge") == "local" && closed("notes/atomic") == "local" && closed("notes/hub") == "hub"
        }
        try await b.waitConverged()
        #expect(try await checker.get("notes/merge").data["title"] == "from-B")
        let atomicRecord = try await checker.get("notes/atomic")
        #expect(atomicRecord.data["title"] == "from-B")
        #expect(atomicRecord.version == atomic.results[0].version, "the mirror wrote the value the dashboard had written")
        let conflictRecord = try await checker.get("conflicts/\(try id("notes/atomic"))")
        #expect(conflictRecord.version == atomic.results[2].version, "the mirror rewrote the dashboard's conflicts record")
        let hubRecord = try await checker.get("notes/hub")
        #expect(hubRecord.data["title"] == "from-A")
        #expect(try await checker.get("conflicts/\(try id("notes/hub"))").version == hubSide.version)
        try await waitFor("both mirrors to hold the resolved records") {
            try [a, b].allSatisfy { mirror in
                try mirror.store.record("notes/merge")?.data?["title"] == "from-B"
                    && mirror.store.record("notes/atomic")?.data?["title"] == "from-B"
                    && mirror.store.record("notes/hub")?.data?["title"] == "from-A"
            }
        }
        #expect(try b.store.conflicts().isEmpty)
        a.stop()
        b.stop()
    }

    @Test func aResolutionMadeWhileTheMirrorWasStoppedIsSeenOnTheNextRun() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        _ = try await checker.set("notes/c", data: ["title": "t0"])
        let policies = PolicyTable(["notes/": .both])
        let a = try TestMirror(patterns: ["notes/"], policies: policies)
        let b = try TestMirror(patterns: ["notes/"], policies: policies)
        for mirror in [a, b] { try await mirror.syncOnce(hub.url, holding: ["notes/c"]) }
        _ = try a.store.write(.set(name: "notes/c", path: "title", value: "from-A"))
        _ = try b.store.write(.set(name: "notes/c", path: "title", value: "from-B"))
        try a.start(hub.url)
        try await a.waitConverged()
        a.stop()
        try b.start(hub.url)
        try await b.waitConverged()
        let conflict = try #require(try b.store.conflicts().first)
        b.stop()

        // Resolved while B is not running: its next run resumes the watch and closes it.
        _ = try await checker.merge("conflicts/\(conflict.id)", patch: ["resolved": true, "take": "local"])
        try b.start(hub.url)
        try await waitFor("the mirror to close the conflict") { try b.store.conflict(conflict.id)?.resolved == "local" }
        try await b.waitConverged()
        #expect(try await checker.get("notes/c").data["title"] == "from-B")
        b.stop()
    }
}
