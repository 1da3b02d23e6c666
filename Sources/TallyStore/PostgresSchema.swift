import CSQLite
import TallyPostgres

/// The PostgreSQL store's schema as an explicit list of versioned
/// migrations, like `SQLiteSchema`: the version lives in the one row of
/// `tally_schema`, every pending step runs in one transaction, and a
/// database written by a newer build is refused untouched.
///
/// Every name (record, list, key, index id) and every list entry is
/// `bytea`: names compare by their UTF-8 bytes as in SQLite ("bytea …
/// comparison is done byte by byte", a memcmp, whatever the database's
/// collation), and an entry may hold a NUL byte, which `text` refuses
/// ("The character with code zero cannot be in a string constant").
/// Tables carry a `tally_` prefix: the database may be shared with others.
enum PostgresSchema {
    struct Migration: Sendable {
        let version: Int64
        let summary: String
        let sql: String
    }

    static let migrations: [Migration] = [
        Migration(version: 1, summary: "records, lists, entries, changes, idempotency, indexes, head, meta", sql: """
            CREATE TABLE tally_records(
                name bytea PRIMARY KEY,
                version int8 NOT NULL,
                seq int8 NOT NULL,
                created int8 NOT NULL,
                updated int8 NOT NULL,
                data bytea NOT NULL
            );
            CREATE TABLE tally_lists(
                name bytea PRIMARY KEY,
                version int8 NOT NULL,
                seq int8 NOT NULL,
                created int8 NOT NULL,
                updated int8 NOT NULL,
                count int8 NOT NULL
            );
            -- pos: the ListKey's bytes; entries sort by it (bytea compares as memcmp).
            CREATE TABLE tally_list_entries(
                list bytea NOT NULL,
                pos bytea NOT NULL,
                entry bytea NOT NULL,
                PRIMARY KEY(list, pos)
            );
            CREATE INDEX tally_list_entries_by_entry ON tally_list_entries(list, entry);
            -- kind: 0 record, 1 list.
            CREATE TABLE tally_changes(
                seq int8 PRIMARY KEY,
                time int8 NOT NULL,
                kind int8 NOT NULL,
                name bytea NOT NULL,
                message bytea NOT NULL
            );
            CREATE TABLE tally_idempotency(
                key bytea PRIMARY KEY,
                seq int8 NOT NULL,
                time int8 NOT NULL,
                response bytea NOT NULL
            );
            CREATE INDEX tally_idempotency_by_time ON tally_idempotency(time);
            CREATE TABLE tally_record_index(
                idx bytea NOT NULL,
                value bytea NOT NULL,
                name bytea NOT NULL,
                updated int8 NOT NULL,
                PRIMARY KEY(idx, value, name)
            );
            CREATE INDEX tally_record_index_by_update ON tally_record_index(idx, value, updated, name);
            CREATE TABLE tally_record_indexes(
                idx bytea PRIMARY KEY
            );
            -- The head row: every group commit moves it from the head it expects
            -- (UPDATE … WHERE seq = expected), which locks it until COMMIT.
            CREATE TABLE tally_head(
                one bool PRIMARY KEY DEFAULT true CHECK (one),
                seq int8 NOT NULL
            );
            INSERT INTO tally_head(seq) VALUES (0);
            CREATE TABLE tally_meta(
                one bool PRIMARY KEY DEFAULT true CHECK (one),
                floor_seq int8 NOT NULL,
                change_count int8 NOT NULL,
                change_bytes int8 NOT NULL
            );
            INSERT INTO tally_meta(floor_seq, change_count, change_bytes) VALUES (0, 0, 0);
            """),
        // A rank counted over the primary key reads every entry before the
        // key (4–17 ms at 100,000 entries): counted blocks, as SQLite's
        // schema 6 (PostgresListBlocks.swift). The lists already stored
        // are cut into blocks of 1,024 here, the first of each list starting
        // at the empty key.
        Migration(version: 2, summary: "counted blocks of list entries", sql: """
            CREATE TABLE tally_list_blocks(
                list bytea NOT NULL,
                start bytea NOT NULL, -- the block's entries: start <= pos < the next block's start
                count int8 NOT NULL,
                PRIMARY KEY(list, start)
            );
            INSERT INTO tally_list_blocks(list, start, count)
            SELECT list, CASE WHEN rn = 1 THEN ''::bytea ELSE pos END, least(1024, total - rn + 1)
            FROM (SELECT list, pos, row_number() OVER (PARTITION BY list ORDER BY pos) AS rn,
                         count(*) OVER (PARTITION BY list) AS total
                  FROM tally_list_entries) numbered
            WHERE (rn - 1) % 1024 = 0;
            """),
        // Several hubs on one database: a hub that did not make a change
        // replays it against the record as it was (SharedStore.swift), and
        // may never have read that record. NULL: a list change, a record
        // created, or a change logged before this version.
        Migration(version: 3, summary: "each record change keeps the record it changed", sql: """
            ALTER TABLE tally_changes ADD COLUMN prior bytea;
            """),
        // Photos, so that every hub on the database serves what any hub
        // stored (PostgresBlobTable.swift). `size` is checked against the
        // bytes so that the quota's SUM(size) is what the rows hold.
        Migration(version: 4, summary: "photos (content-addressed blobs)", sql: """
            CREATE TABLE tally_blobs(
                sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
                type text NOT NULL,
                size int8 NOT NULL CHECK (size = octet_length(data)),
                data bytea NOT NULL,
                created timestamptz NOT NULL DEFAULT now()
            );
            ALTER TABLE tally_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
            """),
        // Each hub's clients' sync health, published about once a second
        // (PostgresClientTable.swift); readers skip rows not seen lately.
        Migration(version: 5, summary: "clients' sync health of every hub", sql: """
            CREATE TABLE tally_clients(
                hub text NOT NULL,
                session int8 NOT NULL,
                row jsonb NOT NULL,
                seen timestamptz NOT NULL,
                PRIMARY KEY(hub, session)
            );
            CREATE INDEX tally_clients_by_seen ON tally_clients(seen);
            """),
        // Smaller copies of the photos (GET /v1/blobs/{sha256}?w=N), made
        // once by whichever hub was asked first and served by all
        // (PostgresBlobTable.swift). Derived data: not in the quota's SUM,
        // and any row may be deleted (it is made again on demand).
        Migration(version: 6, summary: "photo thumbnails", sql: """
            CREATE TABLE tally_blob_thumbs(
                sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
                width int8 NOT NULL CHECK (width > 0),
                format text NOT NULL,
                data bytea NOT NULL,
                created timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY(sha256, width, format)
            );
            ALTER TABLE tally_blob_thumbs ALTER COLUMN data SET STORAGE EXTERNAL;
            """),
    ]

    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    /// Any fixed number: the advisory lock that keeps two hubs opening the
    /// same new database from both running the steps ("pg_advisory_xact_lock
    /// … released automatically at the end of the current transaction").
    static let migrationLock: Int64 = 0x7461_6C6C_7973_6368  // "tallysch"

    static let readVersion = PostgresStatement("read schema version", "SELECT version FROM tally_schema")

    /// Brings the database up to `latestVersion` in one transaction, or
    /// leaves it as it was. Refuses a database of a newer build.
    static func migrate(_ connection: PostgresConnection) throws(StoreError) {
        var step = "begin"
        let newer: Int64?
        do throws(PostgresError) {
            newer = try migrateSteps(connection, step: &step)
        } catch {
            if connection.inTransaction { try? connection.execute(script: "ROLLBACK") }
            var mapped = StoreError(error)
            mapped.operation = "\(step): \(mapped.operation)"
            throw mapped
        }
        if let newer {
            throw StoreError(code: SQLITE_ERROR,
                             message: "schema version \(newer) is newer than this build's \(latestVersion)",
                             operation: "migrate")
        }
    }

    /// The transaction of `migrate`; the version found when it is newer
    /// than this build's (then nothing was changed).
    private static func migrateSteps(_ connection: PostgresConnection, step: inout String) throws(PostgresError) -> Int64? {
        try connection.execute(script: "BEGIN")
        step = "lock"
        try connection.query("SELECT pg_advisory_xact_lock($1)", [.int8(migrationLock)])
        try connection.execute(script: """
            CREATE TABLE IF NOT EXISTS tally_schema(
                one bool PRIMARY KEY DEFAULT true CHECK (one),
                version int8 NOT NULL
            );
            INSERT INTO tally_schema(version) VALUES (0) ON CONFLICT DO NOTHING;
            """)
        let found = try connection.execute(readVersion).firstRow().int64(0)
        guard found <= latestVersion else {
            try connection.execute(script: "ROLLBACK")
            return found
        }
        for migration in migrations where migration.version > found {
            step = "migrate to \(migration.version) (\(migration.summary))"
            try connection.execute(script: migration.sql)
            try connection.query("UPDATE tally_schema SET version = $1", [.int8(migration.version)])
        }
        step = "migrate to \(latestVersion): commit"
        let result = try connection.query("COMMIT")
        guard result.commandStatus == "COMMIT" else {
            throw PostgresError(kind: .server, sqlState: "25P02", message: "rolled back (\(result.commandStatus))",
                                operation: "commit")
        }
        return nil
    }
}
