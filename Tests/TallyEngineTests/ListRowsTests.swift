import Testing
@testable import TallyEngine
import TallyProtocol

/// Order keys, edits laid over rows, and list writes checked against a
/// plain array.
@Suite struct ListRowsTests {
    @Test func keysSortAndAlwaysHaveRoomBetween() {
        var keys = [ListKey.first]
        for _ in 0..<300 { keys.append(keys.last!.after()!) }
        for _ in 0..<300 { keys.insert(keys.first!.before()!, at: 0) }
        #expect(keys == keys.sorted())
        #expect(keys.allSatisfy { $0.bytes.count == 9 }, "appends and prepends stay 9 bytes")
        // Inserting again and again at one place: each key between its neighbours.
        var low = keys[300], high = keys[301]
        for round in 0..<200 {
            let middle = ListKey.between(low, high)
            #expect(low < middle && middle < high)
            #expect(middle.bytes.last != 0)
            if round % 2 == 0 { high = middle } else { low = middle }
        }
        #expect(ListKey.between(low, high).bytes.count < 40, "a byte per eight inserts at one place")
        // Short keys made by between still have a key after and before them.
        let short = ListKey.between(ListKey(integer: 0), ListKey(integer: 1 << 40))
        #expect(short.after()! > short && short.before()! < short)
    }

    @Test func cursorsRoundTripAndBadOnesAreRefused() {
        let key = ListKey.between(.first, ListKey(integer: 1))
        #expect(ListKey(hex: key.description) == key)
        for bad in ["", "0", "zz", "8000", "80000000000000000100", "ABCD", String(repeating: "01", count: 2000)] {
            #expect(ListKey(hex: bad) == nil, "\(bad)")
        }
    }

    /// The cache lays uncommitted edits over the store's rows while the
    /// store may already have committed some of them: it reads the same.
    @Test func editsReadTheSameOverABaseThatAlreadyHasThem() throws {
        var base = SortedListRows(rows: (0..<6).map { ListRow(key: ListKey(integer: Int64($0)), entry: "e\($0)") })
        var edits = ListEdits()
        let inserted = ListRow(key: ListKey.between(ListKey(integer: 2), ListKey(integer: 3)), entry: "new")
        let steps: [ListEdit] = [.insert(inserted), .remove([ListKey(integer: 0), ListKey(integer: 4)]),
                                 .insert(ListRow(key: ListKey(integer: 6), entry: "end"))]
        for (seq, step) in steps.enumerated() { edits.apply(step, seq: Int64(seq + 1)) }
        let expected = ["e1", "e2", "new", "e3", "e5", "end"]
        func read(_ base: SortedListRows, descending: Bool = false, after: ListKey? = nil) throws -> [String] {
            let cursor = edits.cursor(over: base.cursor(descending: descending, after: after), descending: descending, after: after)
            var entries: [String] = []
            while let row = try cursor.next() { entries.append(row.entry) }
            return entries
        }
        /// The edited rows' ranks and rows by index, through the base's.
        func ranked(_ base: SortedListRows) throws -> (rows: [String], ranks: [Int], held: [Bool]) {
            func baseRank(_ key: ListKey) -> ([ListKey]) -> (below: Int, held: [Bool]) {
                { keys in (base.rows.filter { $0.key < key }.count, keys.map { k in base.rows.contains { $0.key == k } }) }
            }
            func rank(_ key: ListKey, _ asked: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]) {
                try edits.rank(below: key, holding: asked, base: baseRank(key))
            }
            var rows: [String] = []
            for index in 0...expected.count {
                let row = try edits.row(at: index, baseRow: { $0 < base.rows.count ? base.rows[$0] : nil },
                                        rank: { key throws(ProtocolError) in
                                            let r = try rank(key, [key])
                                            return (r.below, r.held[0])
                                        },
                                        rows: { after in edits.cursor(over: base.cursor(descending: false, after: after),
                                                                      descending: false, after: after) })
                if let row { rows.append(row.entry) } else { #expect(index == expected.count) }
            }
            let probes = (0...7).map { ListKey(integer: Int64($0)) } + [inserted.key]
            return (rows, try probes.map { try rank($0, []).below }, try rank(.first, probes).held)
        }
        for committed in 0...steps.count {
            #expect(try read(base) == expected, "with \(committed) of the edits in the base")
            let r = try ranked(base)
            #expect(r.rows == expected, "rows by index with \(committed) of the edits in the base")
            // Below keys 0…7 and the inserted one: e1 e2 new e3 e5 end.
            #expect(r.ranks == [0, 0, 1, 3, 4, 4, 5, 6, 2], "with \(committed) of the edits in the base")
            #expect(r.held == [false, true, true, true, false, true, true, false, true])
            #expect(try read(base, descending: true) == expected.reversed())
            #expect(try read(base, after: ListKey(integer: 2)) == ["new", "e3", "e5", "end"])
            #expect(try read(base, descending: true, after: ListKey(integer: 3)) == ["new", "e2", "e1"])
            if committed < steps.count { base.apply(steps[committed]) }
        }
        #expect(edits.keys(holding: "new", baseKeys: []) == [inserted.key])
        edits.prune(through: 3)
        #expect(edits.isEmpty)
        // A clear drops the base's rows.
        edits.apply(.replace([ListRow(key: .first, entry: "only")]), seq: 4)
        #expect(try read(base) == ["only"])
        #expect(edits.keys(holding: "e1", baseKeys: [ListKey(integer: 1)]) == [])
    }

    /// Random appends, inserts, removals (by entry and by index), clears and
    /// atomic groups against an array: entries, pushes' indexes and counts
    /// agree.
    @Test func writesAgreeWithAnArray() throws {
        let hub = EngineHarness()
        var model: [String] = []
        var random = PathReplayTests.Generator(state: 14)
        for round in 0..<600 {
            let pick = random.next() % 100
            var writes: [Write] = []
            var expected = model
            var indexes: [[Int]] = []
            let groupSize = pick < 10 ? 3 : 1
            for _ in 0..<groupSize {
                let choice = random.next() % 100
                let entry = "e\(random.next() % 40)"
                if choice < 45 || expected.isEmpty {
                    let at = choice < 20 ? Int(random.next() % UInt64(expected.count + 1)) : nil
                    writes.append(Write(name: "l", action: .addEntry(entry, at: at)))
                    expected.insert(entry, at: at ?? expected.count)
                    indexes.append([at ?? expected.count - 1])
                } else if choice < 75 {
                    let at = Int(random.next() % UInt64(expected.count))
                    writes.append(Write(name: "l", action: .removeEntry(expected[at], at: at)))
                    expected.remove(at: at)
                    indexes.append([at])
                } else if choice < 97 {
                    let victim = expected[Int(random.next() % UInt64(expected.count))]
                    let found = expected.indices.filter { expected[$0] == victim }
                    writes.append(Write(name: "l", action: .removeEntry(victim, at: nil)))
                    expected.removeAll { $0 == victim }
                    indexes.append(found)
                } else {
                    let entries = (0..<Int(random.next() % 5)).map { "s\($0)" }
                    writes.append(Write(name: "l", action: .setEntries(entries)))
                    expected = entries
                    indexes.append([])
                }
            }
            let changes = try hub.apply(writes, atomic: writes.count > 1)
            model = expected
            for (change, wanted) in zip(changes, indexes) {
                let push = try pushObject(change)
                if let index = push["index"] { #expect(index == .number(JSONNumber(wanted[0])), "round \(round)") }
                if let got = push["indexes"] { #expect(got == .array(wanted.map { .number(JSONNumber($0)) }), "round \(round)") }
            }
            #expect(hub.state.entries(named: "l") == model, "round \(round)")
            #expect(hub.state.list(named: "l")?.count == model.count)
        }
    }

    @Test func aLongListsConflictLeavesItsEntriesOut() throws {
        let hub = EngineHarness(limits: EngineLimits(maxConflictEntries: 3))
        try hub.write(Write(name: "l", action: .setEntries(["a", "b", "c"])))
        #expect(hub.error(Write(name: "l", action: .addEntry("x", at: nil), baseVersion: 9))?.details["entries"] == ["a", "b", "c"])
        try hub.write(Write(name: "l", action: .addEntry("d", at: nil)))
        let error = hub.error(Write(name: "l", action: .addEntry("x", at: nil), baseVersion: 9))
        #expect(error?.code == .conflict)
        #expect(error?.details["version"] == 2)
        #expect(error?.details["entries"] == nil)
    }
}
