@preconcurrency import Glibc
import TallyConcurrency
import TallyPostgres
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// The tables hubs sharing one PostgreSQL database keep besides the store's:
/// photos (`PostgresBlobTable`, schema 4) and clients' sync health
/// (`PostgresClientTable`, schema 5), and the migration that brings a
/// database of schema 2 to them.
@Suite struct PostgresSharedTablesTests {
    static func freshDatabase(_ prefix: String = "shared") throws -> String {
        try PostgresCluster.shared().createDatabase(prefix)
    }

    /// A database as a build of schema 2 left it (versions 1 and 2 applied
    /// by hand, with a record) gets 4 and 5 — the gap where 3 will be does
    /// not stop it — and keeps what it held.
    @Test func aDatabaseAtVersion2Migrates() throws {
        let url = try Self.database(atVersion: 2)
        let admin = try PostgresConnection(url: url)
        try admin.query("INSERT INTO tally_records VALUES ($1, 1, 1, 0, 0, $2)", [.bytea(Array("kept".utf8)), .bytea(Array("{}".utf8))])
        try admin.query("UPDATE tally_head SET seq = 1")
        #expect(try Self.tables(admin).isDisjoint(with: ["tally_blobs", "tally_clients"]))

        let store = try PostgresStore(url: url)
        defer { store.close() }
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == PostgresSchema.latestVersion)
        #expect(PostgresSchema.latestVersion >= 5)
        #expect(try Self.tables(admin).isSuperset(of: ["tally_blobs", "tally_clients"]))
        let reader = try store.makeReader()
        #expect(try reader.record("kept")?.data == Array("{}".utf8))
        #expect(try reader.sequenceBounds().head == 1)

        // And both tables work on it.
        let blobs = try PostgresBlobTable(url: url)
        defer { blobs.close() }
        #expect(try blobs.insert(Self.sha("a"), type: "image/png", bytes: [1, 2, 3]))
        let clients = try PostgresClientTable(url: url)
        #expect(try clients.publish(hub: "a", rows: [], freshMillis: 5_000, keepMillis: 60_000).head == 1)
    }

    /// A table opened on a database with no schema yet brings it up to date
    /// itself, as the store would.
    @Test func thePhotoTableMigratesAnEmptyDatabase() throws {
        let url = try Self.freshDatabase("blobs_empty")
        let blobs = try PostgresBlobTable(url: url)
        defer { blobs.close() }
        let admin = try PostgresConnection(url: url)
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == PostgresSchema.latestVersion)
        #expect(try blobs.totalBytes() == 0)
    }

    /// Put, get, exists, the SUM and idempotency; every byte value and a
    /// 16 MiB photo come back exactly (binary bytea both ways).
    @Test func photosGoInAndComeOutByteForByte() throws {
        let blobs = try PostgresBlobTable(url: Self.freshDatabase("blobs"), connections: 2)
        defer { blobs.close() }
        let every = (0..<512).map { UInt8(truncatingIfNeeded: $0) }
        let a = Self.sha("every")
        #expect(try !blobs.contains(a))
        #expect(try blobs.read(a) == nil)
        #expect(try blobs.insert(a, type: "image/jpeg", bytes: every))
        #expect(try !blobs.insert(a, type: "image/jpeg", bytes: every), "a second insert of one name does nothing")
        #expect(try blobs.contains(a))
        #expect(try blobs.read(a) == every)

        var random = SplitMix(state: 16)
        let big = (0..<(16 << 20)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let b = Self.sha("big")
        #expect(try blobs.insert(b, type: "image/png", bytes: big))
        #expect(try blobs.read(b) == big)
        #expect(try blobs.totalBytes() == every.count + big.count)
    }

    /// What the hub never sends is refused by the table too: a name that is
    /// not 64 lowercase hex digits, a size that is not the bytes'.
    @Test func theTableRefusesBadRows() throws {
        let url = try Self.freshDatabase("blobs_bad")
        let blobs = try PostgresBlobTable(url: url)
        defer { blobs.close() }
        let refused = #expect(throws: SharedTableError.self) {
            try blobs.insert("ABC", type: "image/png", bytes: [1])
        }
        #expect(refused?.unreachable == false)
        #expect(refused?.detail.contains("23514") == true, "check_violation: \(String(describing: refused))")
        let admin = try PostgresConnection(url: url)
        #expect(throws: PostgresError.self) {
            try admin.query("INSERT INTO tally_blobs(sha256, type, size, data) VALUES ($1, 'image/png', 5, '\\x01')",
                            [.text(Self.sha("size"))])
        }
        #expect(try blobs.totalBytes() == 0)
    }

    /// Concurrent inserts of one photo from several threads (the pool's
    /// connections): exactly one creates it.
    @Test func concurrentInsertsCreateOnce() throws {
        let blobs = try PostgresBlobTable(url: Self.freshDatabase("blobs_race"), connections: 3)
        defer { blobs.close() }
        let created = LockedValueBox(0)
        let failures = LockedValueBox<[String]>([])
        let name = Self.sha("race")
        onThreads(8) { _ in
            do {
                if try blobs.insert(name, type: "image/gif", bytes: Array(repeating: 7, count: 4096)) {
                    created.withLock { $0 += 1 }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(created.withLock { $0 } == 1)
        #expect(try blobs.totalBytes() == 4096)
    }

    /// A session ended under the pool (an administrator's
    /// pg_terminate_backend, a server restart) is retried once on a new one:
    /// the caller sees no error.
    @Test func aLostSessionIsRetriedOnANewOne() throws {
        let url = try Self.freshDatabase("blobs_lost")
        let blobs = try PostgresBlobTable(url: url, connections: 1)
        defer { blobs.close() }
        let name = Self.sha("lost")
        #expect(try blobs.insert(name, type: "image/png", bytes: [9]))
        let admin = try PostgresConnection(url: url)
        let ended = try admin.query("""
            SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'tally-hub-blobs'
            """).firstRow().int64(0)
        #expect(ended == 1)
        #expect(try blobs.read(name) == [9])
    }

    /// A server that is gone fails each call as unreachable (saying which
    /// server, never a password), and calls work again once it is back.
    @Test func anUnreachableServerIsSaidSoAndRecoveredFrom() throws {
        let cluster = try PostgresCluster.start(fsync: false)
        defer { cluster.destroy() }
        let url = try cluster.createDatabase("gone")
        let blobs = try PostgresBlobTable(url: url, connections: 2)
        defer { blobs.close() }
        let name = Self.sha("gone")
        #expect(try blobs.insert(name, type: "image/png", bytes: [1, 2]))
        try cluster.stop()
        let error = #expect(throws: SharedTableError.self) { try blobs.read(name) }
        #expect(error?.unreachable == true)
        #expect(error?.operation == "read a photo")
        #expect(error?.detail.contains("127.0.0.1:\(cluster.port)") == true, "\(String(describing: error))")
        #expect(throws: SharedTableError.self) { try blobs.insert(Self.sha("later"), type: "image/png", bytes: [3]) }
        try cluster.start()
        #expect(try blobs.read(name) == [1, 2])
        #expect(try blobs.insert(Self.sha("later"), type: "image/png", bytes: [3]))
    }

    // MARK: Clients

    /// Each hub's publish replaces its own rows, and reads back the others'
    /// fresh rows and the database's head in the same statement.
    @Test func hubsPublishAndReadEachOthersRows() throws {
        let url = try Self.migratedDatabase("clients")
        let a = try PostgresClientTable(url: url), b = try PostgresClientTable(url: url)
        #expect(try a.publish(hub: "a", rows: [(1, #"{"n":1}"#), (2, #"{"n":2}"#)], freshMillis: 5_000, keepMillis: 60_000)
                == .init(head: 0, others: []))
        let seen = try b.publish(hub: "b", rows: [(1, #"{"n":3}"#)], freshMillis: 5_000, keepMillis: 60_000)
        #expect(seen.others.map(\.hub) == ["a", "a"])
        #expect(seen.others.map(\.session) == [1, 2])
        #expect(seen.others.map { String(decoding: $0.json, as: UTF8.self) } == [#"{"n": 1}"#, #"{"n": 2}"#])
        #expect(seen.others.allSatisfy { (0..<5_000).contains($0.ageMillis) })

        // Session 1 of a is gone, session 3 is new: a's rows are replaced.
        _ = try a.publish(hub: "a", rows: [(2, #"{"n":2}"#), (3, #"{"n":4}"#)], freshMillis: 5_000, keepMillis: 60_000)
        let admin = try PostgresConnection(url: url)
        try admin.query("UPDATE tally_head SET seq = 42")
        let again = try b.publish(hub: "b", rows: [], freshMillis: 5_000, keepMillis: 60_000)
        #expect(again.head == 42)
        #expect(again.others.map(\.session) == [2, 3])
        #expect(try admin.query("SELECT count(*) FROM tally_clients WHERE hub = 'b'").firstRow().int64(0) == 0,
                "an empty publish withdraws every row of the hub")

        try a.withdraw(hub: "a")
        #expect(try b.publish(hub: "b", rows: [], freshMillis: 5_000, keepMillis: 60_000).others.isEmpty)
    }

    /// Rows not published lately are not read (a hub killed without a
    /// word), and rows much older are deleted by whichever hub publishes.
    @Test func staleRowsAreSkippedThenDeleted() throws {
        let url = try Self.migratedDatabase("clients_stale")
        let dead = try PostgresClientTable(url: url), live = try PostgresClientTable(url: url)
        _ = try dead.publish(hub: "dead", rows: [(1, "{}")], freshMillis: 5_000, keepMillis: 60_000)
        let admin = try PostgresConnection(url: url)
        try admin.query("UPDATE tally_clients SET seen = now() - interval '10 seconds'")
        #expect(try live.publish(hub: "live", rows: [], freshMillis: 5_000, keepMillis: 60_000).others.isEmpty)
        #expect(try admin.query("SELECT count(*) FROM tally_clients").firstRow().int64(0) == 1, "kept a while")
        try admin.query("UPDATE tally_clients SET seen = now() - interval '2 minutes'")
        _ = try live.publish(hub: "live", rows: [], freshMillis: 5_000, keepMillis: 60_000)
        #expect(try admin.query("SELECT count(*) FROM tally_clients").firstRow().int64(0) == 0)
    }

    /// A fresh database as a build whose last migration was `version` left
    /// it: the steps up to it applied by hand, as `PostgresSchema.migrate`
    /// would have.
    static func database(atVersion version: Int64) throws -> String {
        let url = try freshDatabase("schema\(version)")
        let admin = try PostgresConnection(url: url)
        try admin.execute(script: """
            CREATE TABLE tally_schema(one bool PRIMARY KEY DEFAULT true CHECK (one), version int8 NOT NULL);
            INSERT INTO tally_schema(version) VALUES (\(version));
            """)
        for migration in PostgresSchema.migrations where migration.version <= version {
            try admin.execute(script: migration.sql)
        }
        return url
    }

    /// With the schema (the hub's store makes it before the clients' table is used).
    static func migratedDatabase(_ prefix: String) throws -> String {
        let url = try freshDatabase(prefix)
        try PostgresStore(url: url).close()
        return url
    }

    static func tables(_ connection: PostgresConnection) throws -> Set<String> {
        Set(try connection.query("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'").map { try $0.text(0) })
    }

    /// A 64-hex-digit name (not the hash of anything; the table does not check).
    static func sha(_ seed: String) -> String {
        // FNV-1a of the seed: the same name in every run.
        var random = SplitMix(state: seed.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 })
        return (0..<4).map { _ in
            let hex = String(random.next(), radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }
}
