import TallyPostgres
import TallyProtocol

// Counted blocks on PostgreSQL (schema version 2, `tally_list_blocks`), as
// in SQLite (SQLiteListBlocks.swift): a PostgreSQL b-tree keeps no counts
// either, so a rank by `count(*)` over the primary key reads every index
// entry before the key — measured 4–17 ms at 100,000 entries here, growing
// with the list. The blocks make it a sum over one row per 1,024 entries
// plus a count inside one block.
//
// What differs from SQLite is the round trips (~0.2 ms each on loopback,
// against SQLite's microseconds): the common insert is one statement, the
// entry's INSERT in a data-modifying WITH and the block's count in the
// UPDATE it feeds ("data-modifying statements in WITH … are executed
// exactly once, and always to completion"), and a removal of several keys
// counts every block down in one statement. Splits and merges — once per
// `blockSize` writes — take a few more.

/// The statements that change a list's entries and keep its blocks.
struct PostgresListWrites {
    /// Entries per block after a split; a block splits past twice this.
    let blockSize: Int

    init(blockSize: Int) {
        precondition(blockSize >= 2, "a list block holds at least 2 entries")
        self.blockSize = blockSize
    }

    enum Statements {
        static let insertCounted = PostgresStatement("insert list entry", """
            WITH entry AS (INSERT INTO tally_list_entries(list, pos, entry) VALUES ($1, $2, $3))
            UPDATE tally_list_blocks SET count = count + 1
            WHERE list = $1 AND start = (SELECT start FROM tally_list_blocks
                                         WHERE list = $1 AND start <= $2 ORDER BY start DESC LIMIT 1)
            RETURNING start, count
            """, parameters: [.bytea, .bytea, .bytea])
        static let deleteCounted = PostgresStatement("delete list entries", """
            WITH gone AS (DELETE FROM tally_list_entries WHERE list = $1 AND pos = ANY($2) RETURNING pos),
            per AS (SELECT (SELECT b.start FROM tally_list_blocks b WHERE b.list = $1 AND b.start <= gone.pos
                            ORDER BY b.start DESC LIMIT 1) AS start, count(*) AS n
                    FROM gone GROUP BY 1)
            UPDATE tally_list_blocks b SET count = b.count - per.n FROM per
            WHERE b.list = $1 AND b.start = per.start
            RETURNING b.start, b.count
            """, parameters: [.bytea, .byteaArray])
        static let clear = PostgresStatement("clear list entries", """
            WITH entries AS (DELETE FROM tally_list_entries WHERE list = $1)
            DELETE FROM tally_list_blocks WHERE list = $1
            """, parameters: [.bytea])
        static let middleOf = PostgresStatement("find list block middle", """
            SELECT pos FROM tally_list_entries WHERE list = $1 AND pos >= $2 ORDER BY pos LIMIT 1 OFFSET $3
            """, parameters: [.bytea, .bytea, .int8])
        static let nextBlock = PostgresStatement("find next list block", """
            SELECT start, count FROM tally_list_blocks WHERE list = $1 AND start > $2 ORDER BY start LIMIT 1
            """, parameters: [.bytea, .bytea])
        static let putBlock = PostgresStatement("put list block", """
            INSERT INTO tally_list_blocks(list, start, count) VALUES ($1, $2, $3)
            ON CONFLICT(list, start) DO UPDATE SET count = excluded.count
            """, parameters: [.bytea, .bytea, .int8])
        static let deleteBlock = PostgresStatement("delete list block",
                                                   "DELETE FROM tally_list_blocks WHERE list = $1 AND start = $2",
                                                   parameters: [.bytea, .bytea])
    }

    func insert(_ c: PostgresConnection, _ list: [UInt8], _ row: ListRow) throws(PostgresError) {
        let counted = try c.execute(Statements.insertCounted, [.bytea(list), .bytea(row.key.bytes),
                                                               .bytea(Array(row.entry.utf8))])
        guard let block = counted.first else {
            // A list without blocks is empty: its first block starts below every key.
            try put(c, list, start: [], count: 1)
            return
        }
        let start = try block.bytes(0)
        let count = Int(try block.int64(1))
        guard count > 2 * blockSize else { return }
        // Split at the middle entry: the block's entries are the first `count` at or above its start.
        let middle = try c.execute(Statements.middleOf, [.bytea(list), .bytea(start), .int8(Int64(blockSize))]).firstRow()
            .bytes(0)
        try put(c, list, start: start, count: blockSize)
        try put(c, list, start: middle, count: count - blockSize)
    }

    func delete(_ c: PostgresConnection, _ list: [UInt8], _ keys: [ListKey]) throws(PostgresError) {
        guard !keys.isEmpty else { return }
        let counted = try c.execute(Statements.deleteCounted, [.bytea(list), .byteaArray(keys.map(\.bytes))])
        var blocks: [(start: [UInt8], count: Int)] = []
        for row in counted { blocks.append((try row.bytes(0), Int(try row.int64(1)))) }
        blocks.sort { $0.start.lexicographicallyPrecedes($1.start) }
        var merged: Set<[UInt8]> = []
        for block in blocks where !merged.contains(block.start) {
            var count = block.count
            let before = count
            // A small block takes in the next one when both fit: blocks are ranges, no entry moves.
            if count < max(1, blockSize / 4),
               let next = try c.execute(Statements.nextBlock, [.bytea(list), .bytea(block.start)]).first {
                let nextStart = try next.bytes(0)
                let nextCount = Int(try next.int64(1))
                if count + nextCount <= 2 * blockSize {
                    try c.execute(Statements.deleteBlock, [.bytea(list), .bytea(nextStart)])
                    merged.insert(nextStart)
                    count += nextCount
                }
            }
            if count == 0 && !block.start.isEmpty {
                try c.execute(Statements.deleteBlock, [.bytea(list), .bytea(block.start)])
            } else if count != before {
                try put(c, list, start: block.start, count: count)
            }
        }
    }

    func clear(_ c: PostgresConnection, _ list: [UInt8]) throws(PostgresError) {
        try c.execute(Statements.clear, [.bytea(list)])
    }

    private func put(_ c: PostgresConnection, _ list: [UInt8], start: [UInt8], count: Int) throws(PostgresError) {
        try c.execute(Statements.putBlock, [.bytea(list), .bytea(start), .int8(Int64(count))])
    }
}
