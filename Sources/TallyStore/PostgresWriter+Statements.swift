import TallyPostgres

extension PostgresWriter {
    /// The writer's statements, prepared on its connection on first use.
    enum Statements {
        static let readMeta = PostgresStatement("read meta", """
            SELECT h.seq, m.floor_seq, m.change_count, m.change_bytes FROM tally_head h, tally_meta m
            """)
        static let readHead = PostgresStatement("read head", "SELECT seq FROM tally_head")
        // A head behind the hubs' (PostgresWriter.moveOnFromLostHead).
        static let jumpHead = PostgresStatement("move on from a lost head", """
            WITH head AS (UPDATE tally_head SET seq = $1 WHERE seq = $2 RETURNING seq),
            floor AS (UPDATE tally_meta SET floor_seq = $1 WHERE EXISTS (SELECT 1 FROM head)),
            notified AS (SELECT pg_notify($3, $1::text) WHERE EXISTS (SELECT 1 FROM head))
            SELECT (SELECT 1 / count(*) FROM head), (SELECT count(*) FROM notified)
            """, parameters: [.int8, .int8, .text])
        // The head row locked at the start of a group, so that a group
        // built on a head another hub has moved fails before any of its
        // statements run, and groups of several hubs wait for each other
        // instead of failing on each other's rows (ARCHITECTURE.md,
        // "Several hubs on one database").
        static let lockHead = PostgresStatement("lock head", "SELECT seq FROM tally_head FOR UPDATE")
        // Data-modifying WITH clauses all run, once, whether the outer SELECT
        // reads them or not; a plain SELECT in WITH runs only if read, hence
        // the count over `notified`. A head row not moved divides by zero
        // (22012), so that the statement fails and the COMMIT sent with it
        // in one pipeline commits nothing. The meta row comes back as it is after
        // the group: other hubs move its counts too. From $13 on: the
        // group's record, index and idempotency rows (PostgresGroupWrites),
        // each key once, so no two clauses touch one row.
        static let recordGroup = PostgresStatement("record the group", """
            WITH head AS (UPDATE tally_head SET seq = $1 WHERE seq = $2 RETURNING seq),
            added AS (INSERT INTO tally_changes(seq, time, kind, name, message, prior)
                      SELECT s, t, k, n, m, nullif(p, ''::bytea)
                      FROM unnest($3::int8[], $4::int8[], $5::int8[], $6::bytea[], $7::bytea[], $12::bytea[])
                           AS u(s, t, k, n, m, p)),
            counted AS (UPDATE tally_meta SET change_count = change_count + $8, change_bytes = change_bytes + $9
                        WHERE EXISTS (SELECT 1 FROM head)
                        RETURNING floor_seq, change_count, change_bytes),
            notified AS (SELECT pg_notify($11, $1::text) WHERE $10 AND EXISTS (SELECT 1 FROM head)),
            deleted AS (DELETE FROM tally_records WHERE name = ANY($13::bytea[])),
            put AS (INSERT INTO tally_records(name, version, seq, created, updated, data)
                    SELECT * FROM unnest($14::bytea[], $15::int8[], $16::int8[], $17::int8[], $18::int8[], $19::bytea[])
                    ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
                        created = excluded.created, updated = excluded.updated, data = excluded.data),
            unindexed AS (DELETE FROM tally_record_index i
                          USING unnest($20::bytea[], $21::bytea[], $22::bytea[]) AS d(x, v, n)
                          WHERE i.idx = d.x AND i.value = d.v AND i.name = d.n),
            indexed AS (INSERT INTO tally_record_index(idx, value, name, updated)
                        SELECT * FROM unnest($23::bytea[], $24::bytea[], $25::bytea[], $26::int8[])
                        ON CONFLICT(idx, value, name) DO UPDATE SET updated = excluded.updated),
            answered AS (INSERT INTO tally_idempotency(key, seq, time, response)
                         SELECT * FROM unnest($27::bytea[], $28::int8[], $29::int8[], $30::bytea[])
                         ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, time = excluded.time,
                             response = excluded.response)
            SELECT (SELECT 1 / count(*) FROM head), (SELECT count(*) FROM notified),
                   (SELECT floor_seq FROM counted), (SELECT change_count FROM counted),
                   (SELECT change_bytes FROM counted)
            """, parameters: [.int8, .int8, .int8Array, .int8Array, .int8Array, .byteaArray, .byteaArray,
                              .int8, .int8, .bool, .text, .byteaArray] + PostgresGroupWrites.parameterTypes)
        static let upsertRecord = PostgresStatement("put record", """
            INSERT INTO tally_records(name, version, seq, created, updated, data) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
                created = excluded.created, updated = excluded.updated, data = excluded.data
            """, parameters: [.bytea, .int8, .int8, .int8, .int8, .bytea])
        static let deleteRecord = PostgresStatement("delete record", "DELETE FROM tally_records WHERE name = $1",
                                                    parameters: [.bytea])
        static let upsertList = PostgresStatement("put list", """
            INSERT INTO tally_lists(name, version, seq, created, updated, count) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
                created = excluded.created, updated = excluded.updated, count = excluded.count
            """, parameters: [.bytea, .int8, .int8, .int8, .int8, .int8])
        static let deleteList = PostgresStatement("delete list", "DELETE FROM tally_lists WHERE name = $1",
                                                  parameters: [.bytea])
        static let insertChange = PostgresStatement("insert change", """
            INSERT INTO tally_changes(seq, time, kind, name, message, prior) VALUES ($1, $2, $3, $4, $5, $6)
            """, parameters: [.int8, .int8, .int8, .bytea, .bytea, .bytea])
        // After a session lost at COMMIT: did the group's last change land?
        static let changeMessage = PostgresStatement("read change",
                                                     "SELECT message FROM tally_changes WHERE seq = $1",
                                                     parameters: [.int8])
        static let upsertIdempotency = PostgresStatement("put idempotency", """
            INSERT INTO tally_idempotency(key, seq, time, response) VALUES ($1, $2, $3, $4)
            ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, time = excluded.time, response = excluded.response
            """, parameters: [.bytea, .int8, .int8, .bytea])
        static let upsertIndexEntry = PostgresStatement("write index entry", """
            INSERT INTO tally_record_index(idx, value, name, updated) VALUES ($1, $2, $3, $4)
            ON CONFLICT(idx, value, name) DO UPDATE SET updated = excluded.updated
            """, parameters: [.bytea, .bytea, .bytea, .int8])
        static let deleteIndexEntry = PostgresStatement("delete index entry",
                                                        "DELETE FROM tally_record_index WHERE idx = $1 AND value = $2 AND name = $3",
                                                        parameters: [.bytea, .bytea, .bytea])
        static let markIndexBuilt = PostgresStatement("mark index built",
                                                      "INSERT INTO tally_record_indexes(idx) VALUES ($1) ON CONFLICT DO NOTHING",
                                                      parameters: [.bytea])
        static let dropIndexRows = PostgresStatement("drop index rows", "DELETE FROM tally_record_index WHERE idx = $1",
                                                     parameters: [.bytea])
        static let dropIndexMark = PostgresStatement("drop index", "DELETE FROM tally_record_indexes WHERE idx = $1",
                                                     parameters: [.bytea])

        // Retention.
        static let changeSeqAtOffset = PostgresStatement("find prune limit by count",
                                                         "SELECT seq FROM tally_changes ORDER BY seq LIMIT 1 OFFSET $1",
                                                         parameters: [.int8])
        static let oldestChanges = PostgresStatement("find prune limit by age",
                                                     "SELECT seq, time FROM tally_changes ORDER BY seq LIMIT $1",
                                                     parameters: [.int8])
        static let oldestChangeSizes = PostgresStatement("find prune limit by bytes",
                                                         "SELECT seq, octet_length(message) FROM tally_changes ORDER BY seq LIMIT $1",
                                                         parameters: [.int8])
        static let bytesThrough = PostgresStatement("measure pruned changes", """
            SELECT coalesce(sum(octet_length(message)), 0)::int8 FROM tally_changes WHERE seq <= $1
            """, parameters: [.int8])
        static let sumAllBytes = PostgresStatement("measure the change log",
                                                   "SELECT coalesce(sum(octet_length(message)), 0)::int8 FROM tally_changes")
        static let countAllChanges = PostgresStatement("count changes", "SELECT count(*) FROM tally_changes")
        static let deleteChangesThrough = PostgresStatement("prune changes", "DELETE FROM tally_changes WHERE seq <= $1",
                                                            parameters: [.int8])
        static let deleteOldIdempotency = PostgresStatement("prune idempotency", """
            DELETE FROM tally_idempotency WHERE key IN
                (SELECT key FROM tally_idempotency WHERE time < $1 ORDER BY time LIMIT $2)
            """, parameters: [.int8, .int8])
        // Every hub's writer prunes: the meta row, locked first, says how
        // much the log holds now, and keeps two hubs from pruning at once.
        static let lockMeta = PostgresStatement("lock meta", """
            SELECT floor_seq, change_count, change_bytes FROM tally_meta FOR UPDATE
            """)
        static let writeMeta = PostgresStatement("write meta", """
            UPDATE tally_meta SET floor_seq = $1, change_count = $2, change_bytes = $3
            """, parameters: [.int8, .int8, .int8])
    }
}
