@preconcurrency import Glibc
import TallyConcurrency
import TallyPostgres
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// What several hubs on one database need of the PostgreSQL store
/// (`SharedStore`): a group that does not follow the global head fails as
/// `isHeadMoved` and changes nothing, each record change keeps its prior
/// state, the watch hears every writer's commits, and the meta counts stay
/// right with two writers and their retention.
@Suite struct PostgresSharedStoreTests {
    /// Two stores on one fresh database, started, each with its recorder.
    final class Pair {
        let url: String
        let a: PostgresStore
        let b: PostgresStore
        let recordA = CommitRecorder()
        let recordB = CommitRecorder()

        init(retention: StoreRetention = StoreRetention()) throws {
            url = try PostgresCluster.shared().createDatabase("shared")
            a = try PostgresStore(url: url, retention: retention)
            b = try PostgresStore(url: url, retention: retention)
            a.start { [recordA] in recordA.record($0) }
            b.start { [recordB] in recordB.record($0) }
        }

        func close() {
            a.close()
            b.close()
        }
    }

    static func unit(_ seq: Int64, _ name: String, token: UInt64, prior: StoredRecord? = nil) -> StoreUnit {
        var logged = change(seq, .record, name)
        logged.prior = prior
        return StoreUnit(mutations: [.putRecord(record(name, version: seq, seq: seq))], changes: [logged], token: token)
    }

    @Test func aGroupBuiltOnAnOldHeadFailsAndChangesNothing() throws {
        let pair = try Pair()
        defer { pair.close() }
        pair.a.submit(Self.unit(1, "from-a", token: 1))
        #expect(try pair.recordA.wait(for: [1])[0].error == nil)
        // B numbers its change 1 too: it had not heard of A's.
        pair.b.submit(Self.unit(1, "from-b", token: 2))
        let refused = try pair.recordB.wait(for: [2])[0]
        let error = try #require(refused.error)
        #expect(error.isHeadMoved, "\(error)")
        #expect(error.message == "the store moved on: head is 1, expected 0")
        let reader = try pair.b.makeReader()
        #expect(try reader.record("from-b") == nil)
        #expect(try reader.changes(after: 0, limit: 10).map(\.name) == ["from-a"])
        // Caught up, B numbers its change 2 and commits.
        pair.b.resumeAfterFailure()
        pair.b.submit(Self.unit(2, "from-b", token: 3))
        #expect(try pair.recordB.wait(for: [3])[0].error == nil)
        #expect(try reader.changes(after: 0, limit: 10).map(\.seq) == [1, 2])
        #expect(try reader.sequenceBounds().head == 2)
    }

    @Test func priorStatesAreKeptWithTheirChanges() throws {
        let pair = try Pair()
        defer { pair.close() }
        let before = StoredRecord(name: "r", version: 1, seq: 1, created: 5, updated: 6, data: Array(#"{"n":1}"#.utf8))
        pair.a.submit(Self.unit(1, "r", token: 1))
        pair.a.submit(Self.unit(2, "r", token: 2, prior: before))
        _ = try pair.recordA.wait(for: [1, 2])
        let reader = try #require(try pair.b.makeReader() as? any SharedStoreReading)
        let changes = try reader.changesWithPriors(after: 0, limit: 10)
        #expect(changes.map(\.prior) == [nil, before])
        // Plain reads of the log do not carry them.
        #expect(try reader.changes(after: 0, limit: 10).map(\.prior) == [nil, nil])
    }

    @Test func theWatchHearsEveryWritersCommits() throws {
        let pair = try Pair()
        defer { pair.close() }
        let readings = LockedValueBox<[HeadReading]>([])
        pair.b.watchHead { reading in readings.withLock { $0.append(reading) } }
        try waitUntil("the first reading", timeoutMillis: 5_000) { readings.withLock { $0.last?.head } == 0 }
        pair.a.submit(Self.unit(1, "x", token: 1))
        pair.a.submit(Self.unit(2, "x", token: 2))
        _ = try pair.recordA.wait(for: [1, 2])
        try waitUntil("a reading of head 2", timeoutMillis: 5_000) { readings.withLock { $0.last?.head } == 2 }
        let latest = try #require(pair.b.lastHeadReading)
        #expect(latest.reachable)
        #expect(latest.roundTripMicros > 0)
    }

    /// A hub frozen inside a group holds the head row, and every other
    /// hub's commits wait for it: the server ends the writer's session
    /// after 5 s idle in a transaction, whatever the database's setting.
    @Test func theWritersSessionEndsWhenItSitsInATransaction() throws {
        let url = try PostgresCluster.shared().createDatabase("idle")
        let store = try PostgresStore(url: url)
        defer { store.close() }
        let writer = try #require(store.committer.writerBackend as? PostgresWriter)
        let setting = try writer.connection.query("SHOW idle_in_transaction_session_timeout").firstRow().text(0)
        #expect(setting == "5s")
    }

    @Test func metaCountsStayRightWithTwoWritersPruning() throws {
        var retention = StoreRetention()
        retention.maxChanges = 4
        let pair = try Pair(retention: retention)
        defer { pair.close() }
        var seq: Int64 = 0
        for round in 0..<6 {
            let store = round % 2 == 0 ? pair.a : pair.b
            let recorder = round % 2 == 0 ? pair.recordA : pair.recordB
            seq += 1
            store.submit(Self.unit(seq, "n/\(seq)", token: UInt64(seq)))
            #expect(try recorder.wait(for: [UInt64(seq)])[0].error == nil)
        }
        let admin = try PostgresConnection(url: pair.url)
        try waitUntil("retention", timeoutMillis: 10_000, intervalMillis: 20) {
            let row = try admin.query("SELECT change_count, floor_seq FROM tally_meta").firstRow()
            let logged = try admin.query("SELECT count(*) FROM tally_changes").firstRow().int64(0)
            return try row.int64(0) == logged && logged <= 5 && row.int64(1) >= 1
        }
        let row = try admin.query("SELECT change_count, change_bytes FROM tally_meta").firstRow()
        let actual = try admin.query("SELECT count(*), coalesce(sum(octet_length(message)), 0)::int8 FROM tally_changes").firstRow()
        #expect(try row.int64(0) == actual.int64(0))
        #expect(try row.int64(1) == actual.int64(1))
    }
}
