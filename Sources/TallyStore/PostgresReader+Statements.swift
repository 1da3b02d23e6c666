import TallyPostgres

extension PostgresReader {
    /// The reader's statements, prepared on its connection on first use.
    /// Name ranges are `name >= $lower AND name < $upper` on the primary
    /// key, as in SQLite (see NameRange).
    enum Statements {
        static let recordByName = PostgresStatement("read record", """
            SELECT version, seq, created, updated, data FROM tally_records WHERE name = $1
            """, parameters: [.bytea])
        static let listByName = PostgresStatement("read list", """
            SELECT version, seq, created, updated, count FROM tally_lists WHERE name = $1
            """, parameters: [.bytea])
        static let listKeysOfEntry = PostgresStatement("find list entry", """
            SELECT pos FROM tally_list_entries WHERE list = $1 AND entry = $2 ORDER BY pos
            """, parameters: [.bytea, .bytea])
        // The blocks before the key's summed, plus a count inside its block
        // (PostgresListBlocks.swift); no block: an empty list, rank 0.
        static let rank = PostgresStatement("rank list entry", """
            WITH b AS (SELECT start FROM tally_list_blocks WHERE list = $1 AND start <= $2 ORDER BY start DESC LIMIT 1)
            SELECT (coalesce((SELECT sum(count) FROM tally_list_blocks WHERE list = $1 AND start < (SELECT start FROM b)), 0)
                    + (SELECT count(*) FROM tally_list_entries
                       WHERE list = $1 AND pos >= (SELECT start FROM b) AND pos < $2))::int8,
                   ARRAY(SELECT pos FROM tally_list_entries WHERE list = $1 AND pos = ANY($3))
            """, parameters: [.bytea, .bytea, .byteaArray])
        // The last block starting at or before the index (a running sum over
        // one row per block), then an offset inside it.
        static let entryAt = PostgresStatement("read list entry at", """
            WITH found AS (
                SELECT start, ($2 - before)::int8 AS offset_in
                FROM (SELECT start, sum(count) OVER (ORDER BY start) - count AS before
                      FROM tally_list_blocks WHERE list = $1) blocks
                WHERE before <= $2 ORDER BY start DESC LIMIT 1)
            SELECT e.pos, e.entry FROM found, LATERAL (
                SELECT pos, entry FROM tally_list_entries WHERE list = $1 AND pos >= found.start
                ORDER BY pos OFFSET found.offset_in LIMIT 1) e
            """, parameters: [.bytea, .int8])
        static let entriesAscending = PostgresStatement("scan list entries", """
            SELECT pos, entry FROM tally_list_entries WHERE list = $1 ORDER BY pos LIMIT $2
            """, parameters: [.bytea, .int8])
        static let entriesDescending = PostgresStatement("scan list entries backwards", """
            SELECT pos, entry FROM tally_list_entries WHERE list = $1 ORDER BY pos DESC LIMIT $2
            """, parameters: [.bytea, .int8])
        static let entriesAscendingAfter = PostgresStatement("scan list entries", """
            SELECT pos, entry FROM tally_list_entries WHERE list = $1 AND pos > $2 ORDER BY pos LIMIT $3
            """, parameters: [.bytea, .bytea, .int8])
        static let entriesDescendingAfter = PostgresStatement("scan list entries backwards", """
            SELECT pos, entry FROM tally_list_entries WHERE list = $1 AND pos < $2 ORDER BY pos DESC LIMIT $3
            """, parameters: [.bytea, .bytea, .int8])
        static let recordsInRange = PostgresStatement("scan records", """
            SELECT name, version, seq, created, updated, data FROM tally_records
            WHERE name >= $1 AND name < $2 ORDER BY name LIMIT $3
            """, parameters: [.bytea, .bytea, .int8])
        static let listsInRange = PostgresStatement("scan lists", """
            SELECT name, version, seq, created, updated, count FROM tally_lists
            WHERE name >= $1 AND name < $2 ORDER BY name LIMIT $3
            """, parameters: [.bytea, .bytea, .int8])
        static let changesAfter = PostgresStatement("read changes", """
            SELECT seq, time, kind, name, message FROM tally_changes WHERE seq > $1 ORDER BY seq LIMIT $2
            """, parameters: [.int8, .int8])
        static let changesWithPriors = PostgresStatement("read changes to apply", """
            SELECT seq, time, kind, name, message, prior FROM tally_changes WHERE seq > $1 ORDER BY seq LIMIT $2
            """, parameters: [.int8, .int8])
        static let changesOfEntity = PostgresStatement("read entity changes", """
            SELECT seq, time, kind, name, message FROM tally_changes
            WHERE kind = $1 AND name = $2 AND seq > $3 ORDER BY seq LIMIT $4
            """, parameters: [.int8, .bytea, .int8, .int8])
        static let changesInRange = PostgresStatement("read prefix changes", """
            SELECT seq, time, kind, name, message FROM tally_changes
            WHERE kind = 0 AND name >= $1 AND name < $2 AND seq > $3 ORDER BY seq LIMIT $4
            """, parameters: [.bytea, .bytea, .int8, .int8])
        static let idempotencyByKey = PostgresStatement("read idempotency", """
            SELECT seq, time, response FROM tally_idempotency WHERE key = $1
            """, parameters: [.bytea])
        static let builtIndexes = PostgresStatement("read built indexes",
                                                    "SELECT idx FROM tally_record_indexes ORDER BY idx")
        static let indexByName = PostgresStatement("read index by name", """
            SELECT name FROM tally_record_index
            WHERE idx = $1 AND value = $2 AND name >= $3 AND name < $4 ORDER BY name LIMIT $5
            """, parameters: [.bytea, .bytea, .bytea, .bytea, .int8])
        static let indexNewest = PostgresStatement("read index newest first", """
            SELECT name FROM tally_record_index
            WHERE idx = $1 AND value = $2 AND name >= $3 AND name < $4
            ORDER BY updated DESC, name DESC LIMIT $5
            """, parameters: [.bytea, .bytea, .bytea, .bytea, .int8])
        static let indexOldest = PostgresStatement("read index oldest first", """
            SELECT name FROM tally_record_index
            WHERE idx = $1 AND value = $2 AND name >= $3 AND name < $4
            ORDER BY updated, name LIMIT $5
            """, parameters: [.bytea, .bytea, .bytea, .bytea, .int8])
        static let state = PostgresStatement("read state", """
            SELECT h.seq, m.floor_seq, m.change_count, m.change_bytes,
                   (SELECT count(*) FROM tally_records), (SELECT count(*) FROM tally_lists)
            FROM tally_head h, tally_meta m
            """)
    }
}
