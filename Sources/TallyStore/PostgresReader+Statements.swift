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
        static let rank = PostgresStatement("rank list entry", """
            SELECT (SELECT count(*) FROM tally_list_entries WHERE list = $1 AND pos < $2),
                   ARRAY(SELECT pos FROM tally_list_entries WHERE list = $1 AND pos = ANY($3))
            """, parameters: [.bytea, .bytea, .byteaArray])
        static let entryAt = PostgresStatement("read list entry at", """
            SELECT pos, entry FROM tally_list_entries WHERE list = $1 ORDER BY pos OFFSET $2 LIMIT 1
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
