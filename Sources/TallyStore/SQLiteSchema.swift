import CSQLite
import TallyProtocol
import TallySQLite

/// The database schema as an explicit list of versioned migrations.
///
/// The version lives in `PRAGMA user_version` ("an integer at offset 60 in
/// the database header … available for applications to use",
/// sqlite.org/pragma.html#pragma_user_version). A migration never changes
/// once released; a new schema is a new step at the end of the list.
enum SQLiteSchema {
    struct Migration: Sendable {
        let version: Int64
        let summary: String
        let sql: String
        /// Runs after `sql`, in the same transaction: for what SQL cannot
        /// do (decode a blob the hub wrote).
        var swift: (@Sendable (SQLiteConnection) throws(StoreError) -> Void)?
    }

    static let migrations: [Migration] = [
        Migration(version: 1, summary: "records, lists, change log, idempotency, meta", sql: """
            CREATE TABLE records(
                name TEXT PRIMARY KEY NOT NULL,
                version INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                created INTEGER NOT NULL,
                updated INTEGER NOT NULL,
                data BLOB NOT NULL
            ) STRICT, WITHOUT ROWID;
            CREATE TABLE lists(
                name TEXT PRIMARY KEY NOT NULL,
                version INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                created INTEGER NOT NULL,
                updated INTEGER NOT NULL,
                entries BLOB NOT NULL -- ListEntriesCodec
            ) STRICT, WITHOUT ROWID;
            -- kind: 0 record, 1 list. seq is the rowid: appends go to the end of the b-tree.
            CREATE TABLE changes(
                seq INTEGER PRIMARY KEY,
                time INTEGER NOT NULL,
                kind INTEGER NOT NULL,
                name TEXT NOT NULL,
                message BLOB NOT NULL
            ) STRICT;
            CREATE INDEX changes_by_entity ON changes(kind, name, seq);
            CREATE TABLE idempotency(
                key TEXT PRIMARY KEY NOT NULL,
                seq INTEGER NOT NULL,
                time INTEGER NOT NULL,
                response BLOB NOT NULL
            ) STRICT, WITHOUT ROWID;
            CREATE INDEX idempotency_by_time ON idempotency(time);
            -- head_seq, floor_seq and change_count, updated in every commit transaction so that
            -- opening the store never scans a table.
            CREATE TABLE meta(
                key TEXT PRIMARY KEY NOT NULL,
                value INTEGER NOT NULL
            ) STRICT, WITHOUT ROWID;
            INSERT INTO meta(key, value) VALUES ('head_seq', 0), ('floor_seq', 0), ('change_count', 0);
            """),
        // The per-entity index cost a random leaf page per write (records
        // are spread over the name space), a third of each commit's WAL
        // frames; resumes scan the log by seq instead, bounded by the hub
        // (CoreConfiguration.maxReplayScan). Measured: 100 durable writers
        // went from ~19,800 to ~26,000 writes/s.
        Migration(version: 2, summary: "change log without the per-entity index", sql: """
            DROP INDEX changes_by_entity;
            """),
        // Retention by bytes needs the log's size at every commit: kept
        // beside change_count and moved by every commit and prune. An older
        // store is measured once, here (length() of a BLOB reads the record
        // header, not the bytes: sqlite.org/lang_corefunc.html#length).
        Migration(version: 3, summary: "the change log's bytes in meta", sql: """
            INSERT INTO meta(key, value) SELECT 'change_bytes', coalesce(sum(length(message)), 0) FROM changes;
            """),
        // Live queries read records by the value at a path (a workflow's
        // stage, `owner`) instead of scanning a prefix that grows with
        // history. The hub writes the rows with each record and builds an
        // index once, when the configuration first names it.
        Migration(version: 4, summary: "record indexes for live queries", sql: """
            CREATE TABLE record_index(
                idx TEXT NOT NULL,
                value BLOB NOT NULL, -- the JSON text of the value at the index's path
                name TEXT NOT NULL,
                updated INTEGER NOT NULL,
                PRIMARY KEY(idx, value, name)
            ) STRICT, WITHOUT ROWID;
            CREATE INDEX record_index_by_update ON record_index(idx, value, updated, name);
            CREATE TABLE record_indexes(
                idx TEXT PRIMARY KEY NOT NULL
            ) STRICT, WITHOUT ROWID;
            """),
        // A list stored as one blob was rewritten whole by every addEntry:
        // O(n) per write, 1.1 MB per new order once the orders list had
        // 59,000 entries. Each entry is now a row keyed by
        // (list, order key), so a write touches O(log n) pages; the index
        // by entry finds what removeEntry removes. The blobs are decoded
        // here (LEB128 lengths, ListEntriesCodec) into keys 0, 1, 2, …
        Migration(version: 5, summary: "list entries as rows with order keys", sql: """
            CREATE TABLE list_entries(
                list TEXT NOT NULL,
                pos BLOB NOT NULL, -- ListKey: entries sort by it (memcmp)
                entry TEXT NOT NULL,
                PRIMARY KEY(list, pos)
            ) STRICT, WITHOUT ROWID;
            CREATE INDEX list_entries_by_entry ON list_entries(list, entry);
            ALTER TABLE lists ADD COLUMN count INTEGER NOT NULL DEFAULT 0;
            """, swift: splitListBlobs),
        // An insert at an index and a removal's reported index needed the
        // entry's rank, counted by stepping from the nearer end: O(n), up to
        // 230 ms in the middle of 1,000,000 entries. Counted blocks
        // (SQLiteListBlocks.swift) make it a sum over one row per block.
        Migration(version: 6, summary: "counted blocks of list entries", sql: """
            CREATE TABLE list_blocks(
                list TEXT NOT NULL,
                start BLOB NOT NULL, -- the block's entries: start <= pos < the next block's start
                count INTEGER NOT NULL,
                PRIMARY KEY(list, start)
            ) STRICT, WITHOUT ROWID;
            """, swift: SQLiteListWrites.buildBlocks),
    ]

    /// Migration 5's Swift step: every list's blob becomes rows, then the
    /// blob column goes (ALTER TABLE DROP COLUMN, SQLite 3.35+).
    @Sendable static func splitListBlobs(_ connection: SQLiteConnection) throws(StoreError) {
        let names = try connection.prepare("SELECT name FROM lists ORDER BY name", name: "list names")
        var lists: [String] = []
        while try names.step() { lists.append(names.text(0)) }
        names.reset()
        let read = try connection.prepare("SELECT entries FROM lists WHERE name = ?1", name: "read list blob")
        let insert = try connection.prepare("INSERT INTO list_entries(list, pos, entry) VALUES (?1, ?2, ?3)",
                                            name: "insert list entry")
        let count = try connection.prepare("UPDATE lists SET count = ?2 WHERE name = ?1", name: "count list")
        for name in lists {
            try read.bind(1, text: name)
            guard try read.step() else { read.reset(); continue }
            let entries = try read.withBlob(0) { bytes throws(StoreError) in try ListEntriesCodec.decode(bytes) }
            read.reset()
            for (index, entry) in entries.enumerated() {
                try insert.bind(1, text: name)
                try insert.bind(2, blob: ListKey(integer: Int64(index)).bytes)
                try insert.bind(3, text: entry)
                try insert.run()
            }
            try count.bind(1, text: name)
            try count.bind(2, Int64(entries.count))
            try count.run()
        }
        try connection.execute("ALTER TABLE lists DROP COLUMN entries")
    }

    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    /// Brings the database up to `latestVersion` in one transaction: a
    /// step that fails leaves the store exactly as the older build wrote
    /// it (not half way, at a version no released build had). Refuses a
    /// database written by a newer build.
    static func migrate(_ connection: SQLiteConnection) throws(StoreError) {
        let found = try connection.queryInt("PRAGMA user_version")
        try refuseNewer(found)
        guard found < latestVersion else { return }
        try connection.execute("BEGIN IMMEDIATE")
        // Read again inside the write transaction: two processes opening the
        // same new file cannot both run the steps.
        var current: Int64 = 0
        do throws(StoreError) {
            current = try connection.queryInt("PRAGMA user_version")
            try refuseNewer(current)
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
        for migration in migrations where migration.version > current {
            do throws(StoreError) {
                try connection.execute(migration.sql)
                try migration.swift?(connection)
                try connection.execute("PRAGMA user_version = \(migration.version)")
            } catch {
                if connection.inTransaction { try? connection.execute("ROLLBACK") }
                throw StoreError(code: error.code, message: error.message,
                                 operation: "migrate to \(migration.version) (\(migration.summary)): \(error.operation)")
            }
        }
        do throws(StoreError) {
            try connection.execute("COMMIT")
        } catch {
            if connection.inTransaction { try? connection.execute("ROLLBACK") }
            throw StoreError(code: error.code, message: error.message, operation: "migrate to \(latestVersion): commit")
        }
    }

    private static func refuseNewer(_ version: Int64) throws(StoreError) {
        guard version <= latestVersion else {
            throw StoreError(code: SQLITE_ERROR,
                             message: "schema version \(version) is newer than this build's \(latestVersion)",
                             operation: "migrate")
        }
    }
}
