@preconcurrency import Glibc
import Testing
import TallyClient
@testable import TallyMirror
import TallyProtocol
import TallyServer
import TallyHubTestSupport
import TallyTestSupport

// A mirror across a hub restored from an older backup (PROTOCOL.md, "After
// a restore").

@Suite(.serialized) struct MirrorRestoreTests {
    /// The mirror saw the lost hub's seqs, past the backup. Against the
    /// restored hub (same URL) it resumes with a snapshot: records go back
    /// to the backup's versions, one the backup lacks is dropped, its resume
    /// points move past the jump, and the restored hub's new changes arrive.
    @Test func aMirrorOfALostHubFollowsItsRestoredBackup() async throws {
        let hub = try makeTestHub()
        let checker = try await hub.client()
        _ = try await checker.set("notes/a", data: ["v": 1])
        _ = try await checker.set("notes/b", data: ["v": 1])
        let backups = try TemporaryDirectory(prefix: "mirror-backups")
        let backup = try HubBackup.backUp(dataDirectory: hub.dataDirectory, to: backups.path + "/b")
        #expect(backup.manifest.headSeq == 2)
        _ = try await checker.set("notes/a", data: ["v": 2])
        let lostHead = try await checker.set("notes/lost", data: ["v": 1]).seq
        checker.close()

        let mirror = try TestMirror(patterns: ["notes/"])
        try mirror.start(hub.url)
        try await waitFor("the lost hub's records") {
            try mirror.store.record("notes/lost") != nil && mirror.store.record("notes/a")?.version == 2
        }
        mirror.stop()
        #expect(try mirror.store.cursors().values.allSatisfy { $0 >= lostHead })
        let port = hub.port
        hub.stop()

        let disk = try TemporaryDirectory(prefix: "mirror-restored")
        let report = try HubBackup.restore(from: backups.path + "/b", into: disk.path + "/data", force: false)
        let head = report.store.headSeq
        #expect(head == 2 + (1 << 32), "the sequence goes on 2^32 past the backup")
        let restored = try Hub(configuration: HubConfiguration.forTests(dataDirectory: disk.path + "/data", port: port,
                                                                        threads: 1, shutdownGraceMillis: 500))
        defer { restored.shutdown() }

        try mirror.start(hub.url)
        try await waitFor("the restored hub's records") {
            try mirror.store.record("notes/lost") == nil && mirror.store.record("notes/a")?.data == ["v": 1]
        }
        #expect(try mirror.store.record("notes/a")?.version == 1)
        #expect(try mirror.store.record("notes/b")?.data == ["v": 1])
        // Every resume point moves past the jump (the conflict watch's at the next periodic store).
        try await waitFor("resume points past the jump") { try mirror.store.cursors().values.allSatisfy { $0 >= head } }

        let writer = try await hub.client()
        defer { writer.close() }
        #expect(try await writer.set("notes/c", data: ["new": true]).seq == head + 1)
        try await waitFor("the restored hub's new change") { try mirror.store.record("notes/c")?.data == ["new": true] }
        mirror.stop()
    }
}
