@preconcurrency import Glibc
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore
import TallySQLite

/// What only the SQLite backend has: files, reopening, pragmas, checkpoints.
@Suite struct SQLiteStoreTests {
    @Test func reopeningKeepsEverything() throws {
        let directory = try TemporaryDirectory(prefix: "tally-store")
        do {
            let h = try StoreHarness(.sqlite, directory: directory, retention: StoreRetention(maxChanges: 3))
            try h.commit([.putRecord(record("r", version: 3))] + putList("l", ["x", "y"]),
                         changes: (1...6).map { change($0, .record, "r") },
                         idempotency: StoredIdempotency(key: "k", seq: 6, time: testNow, response: [7]))
            try h.sync()
            h.store.close()
        }
        let h = try StoreHarness(.sqlite, directory: directory, retention: StoreRetention(maxChanges: 3))
        #expect(try h.reader.record("r")?.version == 3)
        #expect(try h.reader.entries("l") == ["x", "y"])
        #expect(try h.reader.idempotency("k")?.response == [7])
        let state = try h.reader.state()
        #expect(state.headSeq == 6)
        #expect(state.floorSeq == 3)
        #expect(state.changeCount == 3)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [4, 5, 6])
        #expect(try h.commit(changes: [change(7, .record, "r")]).lastSeq == 7)
    }

    /// The files as a killed process leaves them (database + WAL, no -shm,
    /// nothing checkpointed): every reported commit is there after recovery.
    @Test func crashImageRecoversEveryReportedCommit() throws {
        let h = try StoreHarness(.sqlite)
        var last = CommitOutcome(tokens: [], lastSeq: 0, durationNanos: 0, error: nil)
        for seq in Int64(1)...50 {
            last = try h.commit([.putRecord(record("r\(seq)", seq: seq))], changes: [change(seq, .record, "r\(seq)")])
        }
        let image = try TemporaryDirectory(prefix: "tally-crash")
        let source = try #require(h.directory).path + "/" + SQLiteStore.fileName
        try copyFile(source, image.path + "/" + SQLiteStore.fileName)
        try copyFile(source + "-wal", image.path + "/" + SQLiteStore.fileName + "-wal")

        let recovered = try StoreHarness(.sqlite, directory: image)
        #expect(try recovered.reader.state().headSeq == last.lastSeq)
        #expect(try recovered.reader.state().recordCount == 50)
        #expect(try recovered.reader.changes(after: 0, limit: 100).count == 50)
    }

    @Test(arguments: Durability.allCases)
    func durabilityIsThePragma(durability: Durability) throws {
        let h = try StoreHarness(.sqlite, durability: durability, start: false)
        let store = try #require(h.store as? SQLiteStore)
        let reader = try #require(h.reader as? SQLiteReader)
        #expect(try reader.connection.queryInt("PRAGMA synchronous") == durability.synchronousLevel)
        #expect(try reader.connection.queryText("PRAGMA journal_mode") == "wal")
        #expect(try store.writerPragma("synchronous") == durability.synchronousLevel)
        #expect(try store.writerPragma("busy_timeout") == Int64(SQLiteConnection.busyTimeoutMillis))
        #expect(try reader.connection.queryInt("PRAGMA busy_timeout") == Int64(SQLiteConnection.busyTimeoutMillis))
    }

    @Test func freshFileIsAtTheLatestSchemaAndNewerIsRefused() throws {
        let directory = try TemporaryDirectory(prefix: "tally-store")
        do {
            let h = try StoreHarness(.sqlite, directory: directory)
            let reader = try #require(h.reader as? SQLiteReader)
            #expect(try reader.connection.queryInt("PRAGMA user_version") == SQLiteSchema.latestVersion)
            h.store.close()
        }
        let path = directory.path + "/" + SQLiteStore.fileName
        let raw = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        try raw.execute("PRAGMA user_version = \(SQLiteSchema.latestVersion + 1)")
        raw.close()
        #expect {
            _ = try SQLiteStore(directory: directory.path)
        } throws: { error in
            "\(error)".contains("newer than this build")
        }
    }

    @Test func createsMissingDirectoriesPrivately() throws {
        let parent = try TemporaryDirectory(prefix: "tally-store")
        let nested = parent.path + "/a/b"
        let store = try SQLiteStore(directory: nested)
        store.close()
        var info = stat()
        #expect(stat(nested, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o700)
        // TemporaryDirectory removes files only.
        for file in ["", "-wal", "-shm"] { unlink(nested + "/" + SQLiteStore.fileName + file) }
        rmdir(nested)
        rmdir(parent.path + "/a")
    }

    /// A change_count that disagrees with the table is repaired once by the
    /// first prune that notices, not retried after every commit.
    @Test func wrongChangeCountIsRepaired() throws {
        let directory = try TemporaryDirectory(prefix: "tally-store")
        do {
            let h = try StoreHarness(.sqlite, directory: directory)
            try h.commit(changes: [change(1, .record, "a"), change(2, .record, "b"), change(3, .record, "c")])
            h.store.close()
        }
        let raw = try SQLiteConnection(path: directory.path + "/" + SQLiteStore.fileName, role: .writer, synchronous: .full)
        try raw.execute("UPDATE meta SET value = 1000 WHERE key = 'change_count'")
        raw.close()
        let h = try StoreHarness(.sqlite, directory: directory, retention: StoreRetention(maxChanges: 10))
        try h.sync()
        #expect(try h.reader.state().changeCount == 3)
        #expect(try h.reader.state().floorSeq == 0)
        #expect(try h.reader.changes(after: 0, limit: 10).count == 3)
        #expect(h.diagnostics.pruneFailures == 0)
    }

    /// A store from before retention by bytes is measured once when it is
    /// opened (migration 3); from then on change_bytes moves with every
    /// commit and prune and survives a reopen.
    @Test func changeBytesAreMigratedKeptAndRepaired() throws {
        let directory = try TemporaryDirectory(prefix: "tally-store")
        let changes = (Int64(1)...5).map { change($0, .record, "r\($0)") }
        let total = changes.reduce(0) { $0 + $1.message.count }
        do {
            let h = try StoreHarness(.sqlite, directory: directory)
            try h.commit(changes: changes)
            #expect(try h.reader.state().changeBytes == total)
            h.store.close()
        }
        // As version 2 left it: no change_bytes row, no record indexes, lists as blobs, no blocks.
        let path = directory.path + "/" + SQLiteStore.fileName
        let raw = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        try raw.execute("""
            DELETE FROM meta WHERE key = 'change_bytes'; DROP TABLE record_index; DROP TABLE record_indexes;
            DROP TABLE list_entries; DROP TABLE list_blocks;
            ALTER TABLE lists DROP COLUMN count; ALTER TABLE lists ADD COLUMN entries BLOB NOT NULL DEFAULT x'01';
            PRAGMA user_version = 2
            """)
        raw.close()
        do {
            let h = try StoreHarness(.sqlite, directory: directory)
            #expect(try h.reader.state().changeBytes == total, "measured by the migration")
            try h.commit(changes: [change(6, .record, "r6")])
            #expect(try h.reader.state().changeBytes == total + change(6, .record, "r6").message.count)
            h.store.close()
        }
        // A wrong figure is repaired by the first prune that notices, and nothing is pruned for it.
        let wrong = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        try wrong.execute("UPDATE meta SET value = 1000000 WHERE key = 'change_bytes'")
        wrong.close()
        let h = try StoreHarness(.sqlite, directory: directory, retention: StoreRetention(maxBytes: 10_000))
        try h.sync()
        let state = try h.reader.state()
        #expect(state.changeBytes == total + change(6, .record, "r6").message.count)
        #expect(state.changeCount == 6)
        #expect(state.floorSeq == 0)
        #expect(h.diagnostics.pruneFailures == 0)
    }

    /// Past 1000 WAL pages the writer signals the checkpointer; close
    /// truncates the WAL.
    @Test func checkpointsRunOffTheCommitPath() throws {
        let h = try StoreHarness(.sqlite, durability: .off)
        let blob = [UInt8](repeating: 0x41, count: 16_000)
        for batch in 0..<30 {
            let units = (0..<10).map { i in
                var r = record("big/\(batch)/\(i)")
                r.data = blob
                return h.unit([.putRecord(r)])
            }
            try h.commit(units)
        }
        // 300 × 16 kB ≈ 1200 pages: at least one PASSIVE checkpoint was requested.
        var waited = 0
        while h.diagnostics.checkpoints == 0 && waited < 5_000 {
            usleep(1_000)
            waited += 1
        }
        #expect(h.diagnostics.checkpoints >= 1)
        #expect(h.diagnostics.checkpointFailures == 0)
        let wal = try #require(h.directory).path + "/" + SQLiteStore.fileName + "-wal"
        h.store.close()
        var info = stat()
        #expect(stat(wal, &info) != 0 || info.st_size == 0, "the WAL is empty or gone after close")
    }

    /// The WAL has its working size from the open on, so commits overwrite
    /// blocks it already has instead of growing it (which makes each commit's
    /// fdatasync allocate blocks); a reopen finds the frames a killed
    /// process left before the zeros and keeps them.
    @Test func theWALIsSizedAtOpenSoCommitsDoNotGrowIt() throws {
        let h = try StoreHarness(.sqlite)
        let wal = try #require(h.directory).path + "/" + SQLiteStore.fileName + "-wal"
        let pageSize = try #require(h.reader as? SQLiteReader).connection.queryInt("PRAGMA page_size")
        let presized = 32 + SQLiteConnection.presizedWALFrames * (24 + pageSize)
        #expect(try fileSize(wal) == presized)
        for seq in Int64(1)...40 {
            try h.commit([.putRecord(record("r\(seq)", seq: seq))], changes: [change(seq, .record, "r\(seq)")])
        }
        #expect(try fileSize(wal) == presized, "40 commits landed inside the presized file")

        let image = try TemporaryDirectory(prefix: "tally-crash")
        let source = try #require(h.directory).path + "/" + SQLiteStore.fileName
        try copyFile(source, image.path + "/" + SQLiteStore.fileName)
        try copyFile(wal, image.path + "/" + SQLiteStore.fileName + "-wal")
        let recovered = try StoreHarness(.sqlite, directory: image)
        #expect(try recovered.reader.state().headSeq == 40, "the frames before the zeros are recovered")
        #expect(try recovered.reader.state().recordCount == 40)
        #expect(try fileSize(image.path + "/" + SQLiteStore.fileName + "-wal") == presized,
                "presizing again keeps the recovered frames and adds nothing")
    }

    /// Record prefix scans are index ranges; change queries are seq ranges
    /// (the log has no per-entity index: a write would pay a random page for
    /// it, and resumes read forward from their seq anyway).
    @Test func prefixQueriesUseTheIndexes() throws {
        let h = try StoreHarness(.sqlite, start: false)
        let reader = try #require(h.reader as? SQLiteReader)
        let records = try reader.connection.queryPlan(
            "SELECT name FROM records WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3")
        #expect(records.contains("USING PRIMARY KEY (name>? AND name<?)"), "\(records)")
        let changes = try reader.connection.queryPlan("""
            SELECT seq FROM changes WHERE kind = 0 AND name >= ?1 AND name < ?2 AND seq > ?3 ORDER BY seq LIMIT ?4
            """)
        #expect(changes.contains("USING INTEGER PRIMARY KEY (rowid>?)"), "\(changes)")
        let entity = try reader.connection.queryPlan(
            "SELECT seq FROM changes WHERE kind = ?1 AND name = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4")
        #expect(entity.contains("USING INTEGER PRIMARY KEY (rowid>?)"), "\(entity)")
    }

    /// A list's cursors walk the primary key from a point (no sort, no
    /// scan of the list), and removal by entry finds its keys by the index.
    @Test func listQueriesUseTheIndexes() throws {
        let h = try StoreHarness(.sqlite, start: false)
        let reader = try #require(h.reader as? SQLiteReader)
        for (sql, expected) in [
            ("SELECT pos, entry FROM list_entries WHERE list = ?1 ORDER BY pos DESC", "USING PRIMARY KEY (list=?)"),
            ("SELECT pos, entry FROM list_entries WHERE list = ?1 AND pos > ?2 ORDER BY pos ASC", "USING PRIMARY KEY (list=? AND pos>?)"),
            ("SELECT pos, entry FROM list_entries WHERE list = ?1 AND pos < ?2 ORDER BY pos DESC", "USING PRIMARY KEY (list=? AND pos<?)"),
            ("SELECT pos FROM list_entries WHERE list = ?1 AND entry = ?2 ORDER BY pos", "USING COVERING INDEX list_entries_by_entry (list=? AND entry=?)"),
        ] {
            let plan = try reader.connection.queryPlan(sql)
            #expect(plan.contains(expected) && !plan.contains("TEMP B-TREE"), "\(sql): \(plan)")
        }
    }
}

func copyFile(_ from: String, _ to: String) throws {
    let input = open(from, O_RDONLY)
    guard input >= 0 else { throw TestFailure("open \(from): errno \(errno)") }
    defer { close(input) }
    let output = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    guard output >= 0 else { throw TestFailure("open \(to): errno \(errno)") }
    defer { close(output) }
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
        guard n > 0 else { break }
        _ = buffer.withUnsafeBytes { write(output, $0.baseAddress, n) }
    }
}

extension SQLiteConnection {
    /// EXPLAIN QUERY PLAN's detail lines, joined.
    func queryPlan(_ sql: String) throws -> String {
        let statement = try prepare("EXPLAIN QUERY PLAN " + sql, name: "plan")
        defer { statement.reset() }
        var lines: [String] = []
        while try statement.step() { lines.append(statement.text(3)) }
        return lines.joined(separator: "; ")
    }
}

func fileSize(_ path: String) throws -> Int64 {
    var info = stat()
    guard stat(path, &info) == 0 else { throw TestFailure("stat \(path): errno \(errno)") }
    return Int64(info.st_size)
}
