@preconcurrency import Glibc
import TallyPostgres
import TallyProtocol
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// What only the PostgreSQL store has: its schema in tally_schema, the head
/// row that a second writer moves, one NOTIFY per group, and counted
/// blocks built by a migration.
@Suite struct PostgresStoreTests {
    static func freshDatabase() throws -> String {
        try PostgresCluster.shared().createDatabase("pgstore")
    }

    /// An empty database gets every migration in one go; opening it again
    /// runs none and keeps what was committed.
    @Test func anEmptyDatabaseIsMigratedAndReopened() throws {
        let url = try Self.freshDatabase()
        let first = try PostgresStore(url: url)
        let recorder = CommitRecorder()
        first.start { recorder.record($0) }
        first.submit(StoreUnit(mutations: [.putRecord(record("kept"))], changes: [change(1, .record, "kept")], token: 1))
        #expect(try recorder.wait(for: [1])[0].error == nil)
        first.close()

        let admin = try PostgresConnection(url: url)
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == PostgresSchema.latestVersion)
        #expect(try admin.query("SELECT count(*) FROM tally_head").firstRow().int64(0) == 1)
        #expect(try admin.query("SELECT count(*) FROM tally_meta").firstRow().int64(0) == 1)

        let again = try PostgresStore(url: url)
        defer { again.close() }
        let reader = try again.makeReader()
        #expect(try reader.record("kept") == record("kept"))
        #expect(try reader.sequenceBounds() == (1, 0))
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == PostgresSchema.latestVersion)
    }

    /// A database a newer build wrote is refused and left as it is.
    @Test func aNewerSchemaIsRefusedAndLeftAlone() throws {
        let url = try Self.freshDatabase()
        try PostgresStore(url: url).close()
        let admin = try PostgresConnection(url: url)
        let newer = PostgresSchema.latestVersion + 1
        try admin.query("UPDATE tally_schema SET version = $1", [.int8(newer)])
        let error = try #require(throws: StoreError.self) { try PostgresStore(url: url) }
        #expect(error.message == "schema version \(newer) is newer than this build's \(PostgresSchema.latestVersion)")
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == newer)
        #expect(try admin.query("SELECT seq FROM tally_head").firstRow().int64(0) == 0)
    }

    /// A step that fails rolls every step back: the database stays at the
    /// version it had, and the error names the step.
    @Test func aFailedMigrationLeavesTheOlderSchema() throws {
        let url = try Self.freshDatabase()
        try PostgresStore(url: url).close()
        let admin = try PostgresConnection(url: url)
        // Schema 1, plus a table in the way of migration 2's CREATE TABLE.
        try admin.execute(script: """
            DROP TABLE tally_list_blocks; UPDATE tally_schema SET version = 1;
            CREATE TABLE tally_list_blocks(unrelated int8)
            """)
        let error = try #require(throws: StoreError.self) { try PostgresStore(url: url) }
        #expect(error.operation.hasPrefix("migrate to 2 (counted blocks of list entries)"), "\(error)")
        #expect(error.message.contains("42P07"), "duplicate_table: \(error)")
        #expect(try admin.query("SELECT version FROM tally_schema").firstRow().int64(0) == 1)
        #expect(try admin.query("SELECT count(*) FROM tally_list_blocks").firstRow().int64(0) == 0)
    }

    /// Another writer moves the head row: the next group — with changes or
    /// without — is rolled back and fails with an error the hub can tell
    /// apart from a constraint or a full disk.
    @Test func aGroupWhoseHeadIsStaleFails() throws {
        let h = try StoreHarness(.postgres)
        try h.commit([.putRecord(record("a"))], changes: [change(1, .record, "a")])
        let store = try #require(h.store as? PostgresStore)
        let other = try PostgresConnection(url: store.url)
        try other.query("UPDATE tally_head SET seq = 5")

        let stale = try h.commit([h.unit([.putRecord(record("b"))], changes: [change(2, .record, "b")])])[0]
        let error = try #require(stale.error)
        #expect(error.isHeadMoved)
        #expect(!error.isConstraintViolation && !error.isFull)
        #expect(error.message == "the store moved on: head is 5, expected 1")
        #expect(stale.lastSeq == 1)
        #expect(try h.reader.record("b") == nil)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1])
        #expect(try h.reader.state().changeCount == 1)

        h.store.resumeAfterFailure()
        let noChanges = try h.commit([h.unit([.putRecord(record("c"))])])[0]
        #expect(noChanges.error?.isHeadMoved == true, "every group checks the head, not only those with changes")
        #expect(try h.reader.record("c") == nil)
    }

    /// A group's changes go in with one set-based INSERT; a seq used twice
    /// in the group sends it back through one INSERT per change, which names
    /// the unit at fault: the one before it commits, the one after is discarded.
    @Test func aDuplicateSeqInABatchNamesItsUnit() throws {
        let h = try StoreHarness(.postgres, start: false)
        let units = [
            h.unit([.putRecord(record("a"))], changes: [change(1, .record, "a"), change(2, .record, "a")]),
            h.unit([.putRecord(record("b"))], changes: [change(3, .record, "b"), change(2, .record, "b")]),
            h.unit([.putRecord(record("c"))], changes: [change(4, .record, "c")]),
        ]
        for unit in units { h.store.submit(unit) }
        h.startWriter()
        _ = try h.recorder.wait(for: units.map(\.token))
        let outcomes = h.recorder.all
        #expect(outcomes.map(\.tokens) == [[units[0].token], [units[1].token], [units[2].token]])
        #expect(outcomes[1].error?.code == StoreError.constraintPrimaryKey)
        #expect(outcomes.map(\.discarded) == [false, false, true])
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1, 2])
        #expect(try h.reader.state().changeCount == 2)
        #expect(try h.reader.record("b") == nil)
    }

    /// A session ended under the store (a server restart, an administrator's
    /// pg_terminate_backend) costs no write and no read: the writer and the
    /// reader find the connection lost, reconnect and try again.
    @Test func aLostSessionIsReconnectedWithoutLosingAWrite() throws {
        let h = try StoreHarness(.postgres)
        try h.commit([.putRecord(record("a"))], changes: [change(1, .record, "a")])
        #expect(try h.reader.record("a") != nil)
        let store = try #require(h.store as? PostgresStore)
        let admin = try PostgresConnection(url: store.url)
        let ended = try admin.query("""
            SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'tally-store-%'
            """).firstRow().int64(0)
        #expect(ended == 2, "the writer's session and the reader's")

        let outcome = try h.commit([.putRecord(record("b"))], changes: [change(2, .record, "b")])
        #expect(outcome.lastSeq == 2)
        #expect(try h.reader.record("b") != nil)
        #expect(try h.reader.changes(after: 0, limit: 10).map(\.seq) == [1, 2])
        #expect(try h.reader.sequenceBounds() == (2, 0))
    }

    /// One notification per group that added changes, carrying its last
    /// seq: a batch of three units is one NOTIFY, a unit without changes none.
    @Test func oneNotifyPerGroup() throws {
        let held = HeldCommit()
        let h = try StoreHarness(.postgres, hooks: held.hooks)
        let store = try #require(h.store as? PostgresStore)
        let listener = try PostgresConnection(url: store.url)
        try listener.listen(PostgresWriter.channel)

        let first = h.unit([.putRecord(record("r/1"))], changes: [change(1, .record, "r/1")])
        h.store.submit(first)
        try held.entered.wait()
        let batch = (2...4).map { seq in
            h.unit([.putRecord(record("r/\(seq)"))], changes: [change(Int64(seq), .record, "r/\(seq)")])
        }
        for unit in batch { h.store.submit(unit) }
        held.release()
        _ = try h.recorder.wait(for: [first.token] + batch.map(\.token))
        #expect(h.recorder.all.map(\.tokens) == [[first.token], batch.map(\.token)])
        try h.commit([.putRecord(record("quiet"))])
        try h.commit(changes: [change(5, .record, "r/5")])

        var payloads: [String] = []
        var deadline = 50
        while payloads.last != "5" && deadline > 0 {
            deadline -= 1
            if case .notifications(let received) = try listener.waitForNotifications(timeoutMillis: 100) {
                payloads += received.filter { $0.channel == PostgresWriter.channel }.map(\.payload)
            }
        }
        #expect(payloads == ["1", "4", "5"])
    }

    /// A schema-1 database holding a 100,000-entry list is cut into
    /// counted blocks by migration 2; ranks and entries by index are then
    /// right and read blocks, not entries. Prints the figures
    /// ARCHITECTURE.md quotes, beside a plain count over the primary key.
    @Test func aHundredThousandEntriesAreMigratedToCountedBlocks() throws {
        let url = try PostgresSharedTablesTests.database(atVersion: 1)
        let admin = try PostgresConnection(url: url)
        let n = 100_000
        let keys = (0..<n).map { ListKey(integer: Int64($0)) }
        let list: PostgresValue = .bytea(Array("big".utf8))
        try admin.query("""
            INSERT INTO tally_list_entries(list, pos, entry)
            SELECT $1, p, convert_to('e' || ordinality, 'UTF8') FROM unnest($2::bytea[]) WITH ORDINALITY AS t(p, ordinality)
            """, [list, .byteaArray(keys.map(\.bytes))])

        let store = try PostgresStore(url: url)
        defer { store.close() }
        let recorder = CommitRecorder()
        store.start { recorder.record($0) }
        let reader = try store.makeReader()
        #expect(try admin.query("SELECT count(*), sum(count)::int8 FROM tally_list_blocks").firstRow().int64(0) == 98)
        for index in [0, 1, 1_023, 1_024, 50_000, 99_999] {
            let ranked = try reader.listRank("big", below: keys[index], holding: [keys[index]])
            #expect(ranked.below == index && ranked.held == [true], "rank of \(index)")
            #expect(try reader.listEntry("big", at: index) == ListRow(key: keys[index], entry: "e\(index + 1)"))
        }
        #expect(try reader.listEntry("big", at: n) == nil)

        func median(_ body: () throws -> Void) rethrows -> Double {
            var times: [Double] = []
            for _ in 0..<7 {
                var start = timespec(), end = timespec()
                clock_gettime(CLOCK_MONOTONIC, &start)
                try body()
                clock_gettime(CLOCK_MONOTONIC, &end)
                times.append(Double(end.tv_sec - start.tv_sec) * 1_000 + Double(end.tv_nsec - start.tv_nsec) / 1_000_000)
            }
            return times.sorted()[times.count / 2]
        }
        // Autovacuum analyzes a table after a bulk load like this one; until it
        // has, the planner guesses 69 rows and sorts half the list for a page
        // of the cursor (~9 ms). Measure the planned steady state.
        try admin.execute(script: "ANALYZE tally_list_entries")
        let middle = keys[n / 2]
        var figures: [(String, Double)] = []
        figures.append(("rank in the middle", try median { _ = try reader.listRank("big", below: middle, holding: [middle]) }))
        figures.append(("rank at the end", try median { _ = try reader.listRank("big", below: keys[n - 1], holding: []) }))
        figures.append(("entry at 50,000", try median { _ = try reader.listEntry("big", at: n / 2) }))
        figures.append(("100 entries from the middle", try median {
            let cursor = try reader.listEntries("big", descending: false, after: middle)
            for _ in 0..<100 { _ = try cursor.next() }
        }))
        var token: UInt64 = 0
        var previous = middle
        figures.append(("insert in the middle (one commit)", try median {
            token += 1
            let key = ListKey.between(previous, keys[n / 2 + 1])
            previous = key
            store.submit(StoreUnit(mutations: [.insertListEntry(list: "big", ListRow(key: key, entry: "new"))], token: token))
            let outcome = try recorder.wait(for: [token])[0]
            if let error = outcome.error { throw error }
        }))
        figures.append(("plain count(*) below the middle, for comparison", try median {
            _ = try admin.query("SELECT count(*) FROM tally_list_entries WHERE list = $1 AND pos < $2",
                                [list, .bytea(middle.bytes)])
        }))
        #expect(try reader.listRank("big", below: keys[n / 2 + 1], holding: []).below == n / 2 + 1 + 7)
        for (what, millis) in figures {
            print("postgres store, \(n) entries, \(what): \((millis * 100).rounded() / 100) ms (median of 7)")
        }
    }
}
