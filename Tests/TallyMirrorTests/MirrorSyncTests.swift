@preconcurrency import Glibc
import Testing
import TallyClient
import TallyConcurrency
@testable import TallyMirror
import TallyNet
import TallyProtocol
import TallyServer
import TallyTestSupport

// MirrorSync against a real hub in this process (makeTestHub, TestMirror:
// MirrorTestSupport.swift).

@Suite(.serialized) struct MirrorSyncTests {
    @Test func offlineWritesReachTheHubOnceAfterARestartAndMissedChangesArrive() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        _ = try await checker.set("notes/keep", data: ["v": 0])
        _ = try await checker.set("notes/upd", data: ["n": 0])
        _ = try await checker.set("notes/gone", data: ["x": 1])
        let mirror = try TestMirror(patterns: ["notes/"])
        try mirror.start(hub.url)
        try await waitFor("the first snapshot") { try mirror.store.record("notes/gone")?.data == ["x": 1] }
        mirror.stop()
        checker.close()
        hub.stop()

        // Offline: local writes while the hub is down.
        for k in 1...3 { _ = try mirror.store.write(.set(name: "notes/upd", path: "n", value: .int(Int64(k)))) }
        _ = try mirror.store.write(.set(name: "notes/new", path: nil, value: ["fresh": true]))
        _ = try mirror.store.write(.delete(name: "notes/gone", path: nil))
        #expect(try mirror.store.record("notes/upd")?.data == ["n": 3])
        #expect(try mirror.store.record("notes/gone")?.data == nil)
        #expect(try mirror.store.outboxDepth() == 5)

        try hub.start()
        let other = try await hub.client()
        defer { other.close() }
        let headBefore = try await other.set("notes/keep", data: ["v": "hub-side"]).seq
        try mirror.start(hub.url)
        try await mirror.waitConverged()
        try await waitFor("the hub's change to arrive") { try mirror.store.record("notes/keep")?.data == ["v": "hub-side"] }

        // Each write is one change on the hub, in order.
        let changes = LockedValueBox<[Change]>([])
        let sub = other.subscribe(.prefix("notes/"), since: headBefore) { event in
            if case .changes(let batch, _) = event { changes.withLock { $0 += batch } }
        }
        try await waitFor("the replayed changes") { changes.withLock { $0.count } >= 5 }
        _ = try await other.getPrefix("none/")   // a round trip: pushes sent before its reply have arrived
        let replayed = changes.withLock { $0 }
        _ = sub
        // Each write is one change, a record's in the order they were made (records may interleave).
        #expect(replayed.count == 5)
        #expect(replayed.filter { $0.name == "notes/upd" }.map(\.value) == [.int(1), .int(2), .int(3)])
        #expect(replayed.filter { $0.name == "notes/new" }.map(\.kind) == [.set])
        #expect(replayed.filter { $0.name == "notes/gone" }.map(\.kind) == [.delete])
        #expect(try await other.get("notes/upd").data == ["n": 3])
        #expect(try await other.get("notes/new").data == ["fresh": true])
        #expect(try mirror.store.record("notes/upd")?.version == 4)
        mirror.stop()
    }

    @Test func conflictingEditsOnTwoMirrorsEndInOneStateAndBothRecordsTheConflict() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        _ = try await checker.set("notes/c", data: ["title": "t0", "qty": 1, "color": "red"])
        let policies = PolicyTable(["notes/": .both])
        let a = try TestMirror(patterns: ["notes/"], policies: policies)
        let b = try TestMirror(patterns: ["notes/"], policies: policies)
        for mirror in [a, b] { try await mirror.syncOnce(hub.url, holding: ["notes/c"]) }
        _ = try a.store.write(.set(name: "notes/c", path: "title", value: "from-A"))
        _ = try a.store.write(.set(name: "notes/c", path: "qty", value: 2))
        _ = try b.store.write(.set(name: "notes/c", path: "title", value: "from-B"))
        _ = try b.store.write(.set(name: "notes/c", path: "color", value: "blue"))

        try a.start(hub.url)
        try await a.waitConverged()
        try b.start(hub.url)
        try await b.waitConverged()
        let expected: JSONObject = ["title": "from-A", "qty": 2, "color": "blue"]
        try await waitFor("both mirrors to hold the merged record") {
            try a.store.record("notes/c")?.data == expected && b.store.record("notes/c")?.data == expected
        }
        #expect(try await checker.get("notes/c").data == expected)
        #expect(try a.store.conflicts().isEmpty)
        let conflicts = try b.store.conflicts()
        #expect(conflicts.map(\.field) == ["title"])
        let conflict = try #require(conflicts.first)
        #expect(conflict.local == "from-B" && conflict.hub == "from-A" && conflict.base == "t0")
        let published = try await checker.get("conflicts/\(conflict.id)")
        #expect(published.data["resolved"] == false && published.data["field"] == "title")

        // Taking the mirror's side writes it through the outbox.
        _ = try b.store.resolveConflict(conflict.id, take: .client, mirror: "test")
        try await b.waitConverged()
        try await waitFor("the resolution on the hub") {
            try b.store.record("notes/c")?.data?["title"] == "from-B"
        }
        #expect(try await checker.get("notes/c").data["title"] == "from-B")
        #expect(try await checker.get("conflicts/\(conflict.id)").data["resolved"] == true)
        a.stop()
        b.stop()
    }

    /// A list longer than one page (10,000 entries) is paged in whole,
    /// and a change to it afterwards is applied to every entry.
    @Test func aLongListIsMirroredWithEveryEntry() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        for batch in 0..<12 {
            _ = try await checker.write(atomic: (0..<1000).map { .addEntry("long", entry: "e/\(batch * 1000 + $0)") })
        }
        let mirror = try TestMirror(patterns: ["long"])
        try mirror.start(hub.url)
        try await waitFor("the whole list") { try mirror.store.list("long")?.entries.count == 12_000 }
        _ = try await checker.addEntry("long", entry: "inserted", at: 11_000)
        try await waitFor("the insert") { try mirror.store.list("long")?.entries.count == 12_001 }
        let expected = (0..<11_000).map { "e/\($0)" } + ["inserted"] + (11_000..<12_000).map { "e/\($0)" }
        #expect(try mirror.store.list("long")?.entries == expected)
        mirror.stop()
    }

    @Test func aStageAdvancedOnTwoOfflineMirrorsEndsAtTheFurthestLegalStage() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        defer { checker.close() }
        _ = try await checker.set("items/x", data: ["name": "x", "stock": 5])
        _ = try await checker.set("orders/o1", data: ["item": "items/x", "qty": 1])
        let a = try TestMirror(patterns: ["orders/"])
        let b = try TestMirror(patterns: ["orders/"])
        for mirror in [a, b] {
            try mirror.start(hub.url)
            try await waitFor("the snapshot") { try mirror.store.record("orders/o1") != nil && mirror.store.list("orders") != nil }
            mirror.stop()
        }
        _ = try a.store.write(.set(name: "orders/o1", path: "stage", value: "cancelled"))
        _ = try b.store.write(.set(name: "orders/o1", path: "stage", value: "in-progress"))
        _ = try b.store.write(.set(name: "orders/o1", path: "stage", value: "ready"))

        try b.start(hub.url)
        try await b.waitConverged()
        try a.start(hub.url)
        try await a.waitConverged()
        try await b.waitConverged()
        let record = try await checker.get("orders/o1")
        #expect(record.data["stage"] == "cancelled")
        let history = (record.data["history"]?.arrayValue ?? []).compactMap { $0["to"]?.stringValue }
        #expect(history == ["received", "in-progress", "ready", "cancelled"])
        try await waitFor("both mirrors at the hub's stage") {
            try a.store.record("orders/o1")?.data == record.data && b.store.record("orders/o1")?.data == record.data
        }
        #expect(try a.store.conflicts().isEmpty && b.store.conflicts().isEmpty)
        a.stop()
        b.stop()
    }
}
