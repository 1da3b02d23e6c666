import Testing
import TallyClient
@testable import TallyMirror
import TallyProtocol
import TallyHubTestSupport
import TallyTestSupport

/// `tally mirror run --server a,b`: the run keeps the list as its hub, and
/// when its hub goes it moves to the next and resumes there by seq. Two
/// independent hubs stand for a cluster: the second, further along, answers
/// the resume with its changes after the mirror's seq rather than with a
/// snapshot, which is what shows that the resume point travelled.
@Suite("Mirror across hubs", .serialized)
struct MirrorFailoverTests {
    /// Sets `count` records under `prefix`, one write each.
    private func fill(_ hub: RestartableHub, _ prefix: String, count: Int) async throws {
        let client = try await hub.client()
        defer { client.close() }
        for index in 0..<count { _ = try await client.set("\(prefix)\(index)", data: ["n": .int(Int64(index))]) }
    }

    @Test func aHubLostUnderTheRunGivesWayToTheNextWhereItResumesAndReplays() async throws {
        let first = try makeTestHub()
        let second = try makeTestHub()
        try await fill(first, "items/a", count: 1)     // seq 1 on the first hub
        try await fill(second, "items/b", count: 3)    // seqs 1…3 on the second
        let mirror = try TestMirror(patterns: ["items/"])
        try mirror.start(first.url, others: [second.url])
        try await waitFor("the first hub's snapshot") { try mirror.store.record("items/a0") != nil && mirror.online }
        #expect(try mirror.store.meta("hub") == "\(first.url),\(second.url)")
        #expect(try mirror.store.meta("hub_live") == first.url)

        first.stop()
        _ = try mirror.store.write(.set(name: "items/local", path: nil, value: ["from": "mirror"]))
        try await waitFor("live on the second hub") { try mirror.store.meta("hub_live") == second.url && mirror.online }
        try await mirror.waitConverged()
        try await waitFor("the second hub's changes after seq 1") {
            try mirror.store.record("items/b1") != nil && mirror.store.record("items/b2") != nil
        }
        // A resume, not a snapshot: the second hub's seq 1 was not asked for.
        #expect(try mirror.store.record("items/b0") == nil)
        let checker = try await second.client()
        defer { checker.close() }
        #expect(try await checker.get("items/local").data == ["from": "mirror"])
        mirror.stop()
    }

    @Test func theNextRunWithAListHoldingItsHubKeepsItsResumePoints() async throws {
        let first = try makeTestHub()
        let second = try makeTestHub()
        try await fill(first, "items/a", count: 1)
        try await fill(second, "items/b", count: 3)
        let mirror = try TestMirror(patterns: ["items/"])
        try await mirror.syncOnce(first.url, holding: ["items/a0"])
        // The next run names the cluster; its first hub is gone meanwhile.
        first.stop()
        try mirror.start(first.url, others: [second.url])
        try await waitFor("the second hub's changes after seq 1") {
            try mirror.store.record("items/b1") != nil && mirror.store.record("items/b2") != nil
        }
        #expect(try mirror.store.record("items/b0") == nil)
        #expect(try mirror.store.record("items/a0") != nil)
        mirror.stop()
    }
}
