import TallySQLite
import Testing
@_spi(Testing) @testable import TallyStore
import TallyProtocol
import TallyTestSupport

/// Ranks through counted blocks (SQLite, schema 6) and through the memory
/// store's arrays: after every commit of random inserts, removals and
/// clears, `listRank` and `listEntry` agree with a sorted array, and the
/// SQLite blocks count exactly the entries in their ranges.
@Suite struct StoreListRankTests {
    /// Blocks of 4 split past 8 entries and merge below 1: a few hundred
    /// operations split and merge many times.
    static let smallBlocks = StoreTestHooks(listBlockSize: 4)

    @Test(arguments: Backend.allCases)
    func ranksAgreeWithAnArrayThroughSplitsAndMerges(_ backend: Backend) throws {
        let h = try StoreHarness(backend, hooks: Self.smallBlocks)
        var model: [ListRow] = []
        var random = SplitMix(state: 6)
        var seq: Int64 = 0
        for round in 0..<400 {
            var mutations: [StoreMutation] = []
            for _ in 0..<Int(1 + random.next() % 4) {
                let choice = random.next() % 100
                if choice < 55 || model.isEmpty {
                    let at = Int(random.next() % UInt64(model.count + 1))
                    let key: ListKey
                    if model.isEmpty { key = .first }
                    else if at == 0 { key = model[0].key.before()! }
                    else if at == model.count { key = model[at - 1].key.after()! }
                    else { key = ListKey.between(model[at - 1].key, model[at].key) }
                    let row = ListRow(key: key, entry: "e\(round)")
                    model.insert(row, at: at)
                    mutations.append(.insertListEntry(list: "l", row))
                } else if choice < 97 {
                    // Several at once, some twice, one the list does not hold.
                    var keys: [ListKey] = []
                    for _ in 0..<Int(1 + random.next() % 5) where !model.isEmpty {
                        keys.append(model.remove(at: Int(random.next() % UInt64(model.count))).key)
                    }
                    if let again = keys.first { keys.append(again) }
                    keys.append(ListKey(integer: 1 << 40))
                    mutations.append(.deleteListEntries(list: "l", keys))
                } else {
                    model = (0..<Int(random.next() % 30)).map { ListRow(key: ListKey(integer: Int64($0)), entry: "s\($0)") }
                    mutations.append(.clearListEntries("l"))
                    mutations += model.map { .insertListEntry(list: "l", $0) }
                }
            }
            seq += 1
            mutations.insert(.putList(StoredList(name: "l", version: seq, seq: seq, created: 0, updated: 0,
                                                 count: Int64(model.count))), at: 0)
            try h.commit(mutations, changes: [change(seq, .list, "l")])
            try Self.check(h.reader, model, round: round, random: &random)
            if backend == .sqlite { try Self.checkBlocks(h, model, blockSize: 4, round: round) }
        }
        // Deleting the list drops its blocks with its entries.
        try h.commit([.deleteList("l")], changes: [change(seq + 1, .list, "l")])
        #expect(try h.reader.listEntry("l", at: 0) == nil)
        if backend == .sqlite {
            #expect(try Self.sqlite(h).queryInt("SELECT count(*) FROM list_blocks") == 0)
        }
    }

    static func check(_ reader: any StoreReading, _ model: [ListRow], round: Int,
                      random: inout SplitMix) throws {
        for index in [0, model.count / 2, model.count - 1, model.count, Int(random.next() % UInt64(model.count + 1))] {
            let expected = model.indices.contains(index) ? model[index] : nil
            #expect(try reader.listEntry("l", at: index) == expected, "round \(round): entry at \(index)")
        }
        let probes = model.indices.filter { _ in random.next() % 8 == 0 }.map { model[$0].key }
            + [ListKey(integer: -5), ListKey(integer: 1 << 41)]
        for key in probes {
            let below = model.filter { $0.key < key }.count
            let ranked = try reader.listRank("l", below: key, holding: [key, ListKey(integer: 1 << 40)])
            #expect(ranked.below == below, "round \(round): rank of \(key)")
            #expect(ranked.held == [model.contains { $0.key == key }, false], "round \(round)")
        }
    }

    /// Every block counts the entries in its range, none holds more than
    /// twice the block size, the first starts below every key.
    static func checkBlocks(_ h: StoreHarness, _ model: [ListRow], blockSize: Int, round: Int) throws {
        let c = try sqlite(h)
        let blocks = try c.prepare("SELECT start, count FROM list_blocks WHERE list = 'l' ORDER BY start", name: "blocks")
        var starts: [[UInt8]] = []
        var counts: [Int] = []
        while try blocks.step() {
            starts.append(blocks.blob(0))
            counts.append(Int(blocks.int64(1)))
        }
        blocks.reset()
        guard !model.isEmpty else { return }
        #expect(starts.first == [], "round \(round): the first block starts at the empty key")
        for (index, start) in starts.enumerated() {
            let end = index + 1 < starts.count ? starts[index + 1] : nil
            let inside = model.filter { row in
                !row.key.bytes.lexicographicallyPrecedes(start) && end.map { row.key.bytes.lexicographicallyPrecedes($0) } ?? true
            }
            #expect(counts[index] == inside.count, "round \(round): block \(index) counts \(counts[index]), holds \(inside.count)")
            #expect(counts[index] <= 2 * blockSize, "round \(round): block \(index) too full")
        }
    }

    static func sqlite(_ h: StoreHarness) throws -> SQLiteConnection {
        try #require(h.reader as? SQLiteReader).connection
    }

    /// A rank reads the blocks' counts and one block, not the entries
    /// before it: the plan sums an index range and counts inside a range.
    @Test func ranksReadBlocksNotEntries() throws {
        let h = try StoreHarness(.sqlite, start: false)
        let reader = try #require(h.reader as? SQLiteReader)
        for (sql, expected) in [
            ("SELECT coalesce(sum(count), 0) FROM list_blocks WHERE list = ?1 AND start < ?2", "USING PRIMARY KEY (list=? AND start<?)"),
            ("SELECT count(*) FROM list_entries WHERE list = ?1 AND pos >= ?2 AND pos < ?3", "USING PRIMARY KEY (list=? AND pos>? AND pos<?)"),
            ("SELECT start FROM list_blocks WHERE list = ?1 AND start <= ?2 ORDER BY start DESC LIMIT 1", "USING PRIMARY KEY (list=? AND start<?)"),
        ] {
            let plan = try reader.connection.queryPlan(sql)
            #expect(plan.contains(expected) && !plan.contains("TEMP B-TREE"), "\(sql): \(plan)")
        }
    }
}
