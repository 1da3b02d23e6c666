import TallyProtocol
import TallySQLite

// Counted blocks (schema version 6, `list_blocks`): SQLite's b-trees keep
// no counts, so "which entry is at index i" and "what index has this entry"
// would step through every entry before it — 100–230 ms in the middle of a
// list of 1,000,000. The entries of a list are cut into consecutive key
// ranges, each a row `(list, start, count)`: the block holds the entries
// with `start <= pos <` the next block's start, and the first block starts
// at the empty key, below every entry. A rank is then the sum of the counts
// of the blocks before the entry's (summed inside SQLite, one row per block)
// plus a count inside its block (at most `2 × size` entries).
//
// The writer keeps the counts in the transaction that changes the entries:
// an insert adds one to its block and splits a block that passes `2 × size`
// at its middle entry (O(size), once per `size` inserts); a removal takes
// one off, and a block that falls below `size / 4` takes in the next one
// when both fit in `2 × size` (one row deleted: blocks are ranges, so
// merging moves no entry). With the default size of 1,024, a list filled
// by appends and inserts has about n / 1,024 blocks; removals can leave
// more, smaller ones, never more than one per entry.

/// The statements that change a list's entries and keep its blocks.
struct SQLiteListWrites {
    static let defaultBlockSize = 1024
    /// Entries per block after a split; a block splits past twice this.
    let blockSize: Int
    private let insertEntry: SQLiteStatement
    private let deleteEntry: SQLiteStatement
    private let clearEntries: SQLiteStatement
    private let clearBlocks: SQLiteStatement
    private let blockOf: SQLiteStatement
    private let nextBlock: SQLiteStatement
    private let putBlock: SQLiteStatement
    private let deleteBlock: SQLiteStatement
    private let middleOf: SQLiteStatement

    init(_ c: SQLiteConnection, blockSize: Int) throws(StoreError) {
        precondition(blockSize >= 2, "a list block holds at least 2 entries")
        self.blockSize = blockSize
        insertEntry = try c.prepare("INSERT INTO list_entries(list, pos, entry) VALUES (?1, ?2, ?3)",
                                    name: "insert list entry")
        // RETURNING: the removal tells which block to count down, and
        // removing a key the list does not hold counts nothing.
        deleteEntry = try c.prepare("DELETE FROM list_entries WHERE list = ?1 AND pos = ?2 RETURNING pos",
                                    name: "delete list entry")
        clearEntries = try c.prepare("DELETE FROM list_entries WHERE list = ?1", name: "clear list")
        clearBlocks = try c.prepare("DELETE FROM list_blocks WHERE list = ?1", name: "clear list blocks")
        blockOf = try c.prepare("""
            SELECT start, count FROM list_blocks WHERE list = ?1 AND start <= ?2 ORDER BY start DESC LIMIT 1
            """, name: "find list block")
        nextBlock = try c.prepare("""
            SELECT start, count FROM list_blocks WHERE list = ?1 AND start > ?2 ORDER BY start LIMIT 1
            """, name: "find next list block")
        putBlock = try c.prepare("""
            INSERT INTO list_blocks(list, start, count) VALUES (?1, ?2, ?3)
            ON CONFLICT(list, start) DO UPDATE SET count = excluded.count
            """, name: "put list block")
        deleteBlock = try c.prepare("DELETE FROM list_blocks WHERE list = ?1 AND start = ?2",
                                    name: "delete list block")
        middleOf = try c.prepare("""
            SELECT pos FROM list_entries WHERE list = ?1 AND pos >= ?2 ORDER BY pos LIMIT 1 OFFSET ?3
            """, name: "find list block middle")
    }

    func insert(_ list: String, _ row: ListRow) throws(StoreError) {
        try insertEntry.bind(1, text: list)
        try insertEntry.bind(2, blob: row.key.bytes)
        try insertEntry.bind(3, text: row.entry)
        try insertEntry.run()
        guard let block = try block(of: list, holding: row.key) else {
            try put(list, start: [], count: 1)
            return
        }
        let count = block.count + 1
        guard count > 2 * blockSize else {
            try put(list, start: block.start, count: count)
            return
        }
        // Split at the middle entry: the block's entries are the first
        // `count` at or above its start.
        try middleOf.bind(1, text: list)
        try middleOf.bind(2, blob: block.start)
        try middleOf.bind(3, Int64(blockSize))
        defer { middleOf.reset() }
        guard try middleOf.step() else {
            throw StoreError(code: 0, message: "list \"\(list)\" has fewer entries than its block counts",
                             operation: "split list block")
        }
        let middle = middleOf.blob(0)
        try put(list, start: block.start, count: blockSize)
        try put(list, start: middle, count: count - blockSize)
    }

    func delete(_ list: String, _ key: ListKey) throws(StoreError) {
        try deleteEntry.bind(1, text: list)
        try deleteEntry.bind(2, blob: key.bytes)
        let removed: Bool
        do {
            removed = try deleteEntry.step()
            while try deleteEntry.step() {}
        } catch {
            deleteEntry.reset()
            throw error
        }
        deleteEntry.reset()
        guard removed, let block = try block(of: list, holding: key) else { return }
        var count = block.count - 1
        if count < max(1, blockSize / 4), let next = try self.block(after: block.start, in: list),
           count + next.count <= 2 * blockSize {
            try remove(list, start: next.start)
            count += next.count
        }
        if count == 0 && !block.start.isEmpty {
            try remove(list, start: block.start)
        } else {
            try put(list, start: block.start, count: count)
        }
    }

    func clear(_ list: String) throws(StoreError) {
        try clearEntries.bind(1, text: list)
        try clearEntries.run()
        try clearBlocks.bind(1, text: list)
        try clearBlocks.run()
    }

    private func block(of list: String, holding key: ListKey) throws(StoreError) -> (start: [UInt8], count: Int)? {
        try blockOf.bind(1, text: list)
        try blockOf.bind(2, blob: key.bytes)
        defer { blockOf.reset() }
        return try blockOf.step() ? (blockOf.blob(0), Int(blockOf.int64(1))) : nil
    }

    private func block(after start: [UInt8], in list: String) throws(StoreError) -> (start: [UInt8], count: Int)? {
        try nextBlock.bind(1, text: list)
        try nextBlock.bind(2, blob: start)
        defer { nextBlock.reset() }
        return try nextBlock.step() ? (nextBlock.blob(0), Int(nextBlock.int64(1))) : nil
    }

    private func put(_ list: String, start: [UInt8], count: Int) throws(StoreError) {
        try putBlock.bind(1, text: list)
        try putBlock.bind(2, blob: start)
        try putBlock.bind(3, Int64(count))
        try putBlock.run()
    }

    private func remove(_ list: String, start: [UInt8]) throws(StoreError) {
        try deleteBlock.bind(1, text: list)
        try deleteBlock.bind(2, blob: start)
        try deleteBlock.run()
    }

    /// Cuts every list's entries into blocks of `defaultBlockSize`
    /// (migration 6): O(entries), in key order.
    @Sendable static func buildBlocks(_ c: SQLiteConnection) throws(StoreError) {
        let blockSize = defaultBlockSize
        try c.execute("DELETE FROM list_blocks")
        let entries = try c.prepare("SELECT list, pos FROM list_entries ORDER BY list, pos", name: "scan all list entries")
        let put = try c.prepare("INSERT INTO list_blocks(list, start, count) VALUES (?1, ?2, ?3)", name: "put list block")
        var current: (list: String, start: [UInt8], count: Int)?
        func flush() throws(StoreError) {
            guard let block = current else { return }
            try put.bind(1, text: block.list)
            try put.bind(2, blob: block.start)
            try put.bind(3, Int64(block.count))
            try put.run()
        }
        while try entries.step() {
            let list = entries.text(0)
            if var block = current, block.list == list, block.count < blockSize {
                block.count += 1
                current = block
                continue
            }
            try flush()
            let first = current?.list != list
            current = (list, first ? [] : entries.blob(1), 1)
        }
        entries.reset()
        try flush()
    }
}

/// The statements that rank a list's entries through its blocks.
struct SQLiteListRanks {
    private let blockOf: SQLiteStatement
    private let countBefore: SQLiteStatement
    private let countInBlock: SQLiteStatement
    private let blocks: SQLiteStatement
    private let entryAtOffset: SQLiteStatement
    private let hasKey: SQLiteStatement

    init(_ c: SQLiteConnection) throws(StoreError) {
        blockOf = try c.prepare("""
            SELECT start FROM list_blocks WHERE list = ?1 AND start <= ?2 ORDER BY start DESC LIMIT 1
            """, name: "find list block")
        countBefore = try c.prepare("""
            SELECT coalesce(sum(count), 0) FROM list_blocks WHERE list = ?1 AND start < ?2
            """, name: "count list blocks before")
        countInBlock = try c.prepare("""
            SELECT count(*) FROM list_entries WHERE list = ?1 AND pos >= ?2 AND pos < ?3
            """, name: "count list entries in block")
        blocks = try c.prepare("SELECT start, count FROM list_blocks WHERE list = ?1 ORDER BY start",
                               name: "scan list blocks")
        entryAtOffset = try c.prepare("""
            SELECT pos, entry FROM list_entries WHERE list = ?1 AND pos >= ?2 ORDER BY pos LIMIT 1 OFFSET ?3
            """, name: "list entry at offset")
        hasKey = try c.prepare("SELECT 1 FROM list_entries WHERE list = ?1 AND pos = ?2", name: "find list key")
    }

    /// How many entries of `list` have a key below `key`, and which of
    /// `keys` it holds. The caller makes it one read transaction.
    func rank(_ list: String, below key: ListKey, holding keys: [ListKey]) throws(StoreError) -> (below: Int, held: [Bool]) {
        var held: [Bool] = []
        held.reserveCapacity(keys.count)
        for key in keys { held.append(try contains(list, key: key)) }
        try blockOf.bind(1, text: list)
        try blockOf.bind(2, blob: key.bytes)
        let start: [UInt8]? = try blockOf.step() ? blockOf.blob(0) : nil
        blockOf.reset()
        guard let start else { return (0, held) }
        try countBefore.bind(1, text: list)
        try countBefore.bind(2, blob: start)
        let before = try countBefore.step() ? countBefore.int64(0) : 0
        countBefore.reset()
        try countInBlock.bind(1, text: list)
        try countInBlock.bind(2, blob: start)
        try countInBlock.bind(3, blob: key.bytes)
        defer { countInBlock.reset() }
        let inBlock = try countInBlock.step() ? countInBlock.int64(0) : 0
        return (Int(before + inBlock), held)
    }

    /// The entry at `index` of `list` in key order, nil past the end.
    func entry(_ list: String, at index: Int) throws(StoreError) -> ListRow? {
        guard index >= 0 else { return nil }
        try blocks.bind(1, text: list)
        var passed = 0
        var found: (start: [UInt8], offset: Int)?
        do {
            while try blocks.step() {
                let count = Int(blocks.int64(1))
                if index < passed + count {
                    found = (blocks.blob(0), index - passed)
                    break
                }
                passed += count
            }
        } catch {
            blocks.reset()
            throw error
        }
        blocks.reset()
        guard let found else { return nil }
        try entryAtOffset.bind(1, text: list)
        try entryAtOffset.bind(2, blob: found.start)
        try entryAtOffset.bind(3, Int64(found.offset))
        defer { entryAtOffset.reset() }
        guard try entryAtOffset.step() else { return nil }
        return ListRow(key: ListKey(bytes: entryAtOffset.blob(0)), entry: entryAtOffset.text(1))
    }

    private func contains(_ list: String, key: ListKey) throws(StoreError) -> Bool {
        try hasKey.bind(1, text: list)
        try hasKey.bind(2, blob: key.bytes)
        defer { hasKey.reset() }
        return try hasKey.step()
    }
}
