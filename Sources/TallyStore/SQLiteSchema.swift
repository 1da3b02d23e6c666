import CSQLite

/// The database schema as an explicit list of versioned migrations.
///
/// The version lives in `PRAGMA user_version` ("an integer at offset 60 in
/// the database header … available for applications to use",
/// sqlite.org/pragma.html#pragma_user_version). A migration never changes
/// once released; a new schema is a new step at the end of the list.
enum SQLiteSchema {
    struct Migration {
        let version: Int64
        let summary: String
        let sql: String
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
    ]

    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    /// Brings the database up to `latestVersion`, one transaction per step.
    /// Refuses a database written by a newer build.
    static func migrate(_ connection: SQLiteConnection) throws(StoreError) {
        let found = try connection.queryInt("PRAGMA user_version")
        try refuseNewer(found)
        for migration in migrations where migration.version > found {
            try connection.execute("BEGIN IMMEDIATE")
            do throws(StoreError) {
                // Read again inside the write transaction: two processes opening the same new
                // file cannot both run a step.
                let current = try connection.queryInt("PRAGMA user_version")
                try refuseNewer(current)
                if current < migration.version {
                    try connection.execute(migration.sql)
                    try connection.execute("PRAGMA user_version = \(migration.version)")
                }
                try connection.execute("COMMIT")
            } catch {
                if connection.inTransaction { try? connection.execute("ROLLBACK") }
                throw StoreError(code: error.code, message: error.message,
                                 operation: "migrate to \(migration.version) (\(migration.summary)): \(error.operation)")
            }
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
