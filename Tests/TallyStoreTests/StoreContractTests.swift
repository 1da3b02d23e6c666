import Testing
@testable import TallyStore
import TallyProtocol

/// Reads and writes, one body for both backends.
@Suite struct StoreContractTests {
    @Test(arguments: Backend.allCases)
    func putGetDeleteRecord(backend: Backend) throws {
        let h = try StoreHarness(backend)
        #expect(try h.reader.record("a") == nil)
        let a = record("a", version: 1, seq: 1)
        try h.commit([.putRecord(a)])
        #expect(try h.reader.record("a") == a)

        var replaced = record("a", version: 2, seq: 2)
        replaced.data = []  // an empty blob stays an empty blob, not NULL
        try h.commit([.putRecord(replaced)])
        #expect(try h.reader.record("a") == replaced)

        try h.commit([.deleteRecord("a"), .deleteRecord("never-there")])
        #expect(try h.reader.record("a") == nil)
        #expect(try h.reader.state().recordCount == 0)
    }

    /// Puts and deletes of one name, and of one index row, within one
    /// group leave what the last of them says (the PostgreSQL writer sends
    /// a group's rows in one statement, each name once).
    @Test(arguments: Backend.allCases)
    func putsAndDeletesOfOneNameInOneGroupEndAsTheLastSays(backend: Backend) throws {
        let h = try StoreHarness(backend, start: false)
        let entry = StoredIndexEntry(index: "idx", value: Array("v".utf8), name: "kept", updated: 7)
        let units = [
            h.unit([.putRecord(record("kept", version: 1, seq: 1)), .putRecord(record("gone", version: 1, seq: 1)),
                    .putIndexEntry(entry)], changes: [change(1, .record, "kept")]),
            h.unit([.deleteRecord("kept"), .deleteRecord("gone"),
                    .deleteIndexEntry(index: "idx", value: Array("v".utf8), name: "kept")],
                   changes: [change(2, .record, "kept")]),
            h.unit([.putRecord(record("kept", version: 3, seq: 3)), .putIndexEntry(entry)],
                   changes: [change(3, .record, "kept")],
                   idempotency: StoredIdempotency(key: "k", seq: 3, time: testNow, response: [1])),
            h.unit([], changes: [change(4, .record, "x")],
                   idempotency: StoredIdempotency(key: "k", seq: 4, time: testNow, response: [2])),
        ]
        for unit in units { h.store.submit(unit) }
        h.startWriter()
        let outcomes = try h.recorder.wait(for: units.map(\.token))
        #expect(outcomes.allSatisfy { $0.error == nil })
        #expect(try h.reader.record("kept") == record("kept", version: 3, seq: 3))
        #expect(try h.reader.record("gone") == nil)
        #expect(try h.reader.indexedNames(index: "idx", value: Array("v".utf8), prefix: "", after: nil, limit: 10) == ["kept"])
        #expect(try h.reader.idempotency("k")?.response == [2])
    }

    @Test(arguments: Backend.allCases)
    func putGetDeleteList(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let entries = ["a", "", "ünïcødé ✓", "with\u{0}nul", String(repeating: "x", count: 300), "a"]
        try h.commit(putList("todo", entries) + putList("empty", []))
        #expect(try h.reader.list("todo") == list("todo", entries))
        #expect(try h.reader.entries("todo") == entries)
        #expect(try h.reader.entries("todo", descending: true) == entries.reversed())
        #expect(try h.reader.entries("todo", after: ListKey(integer: 1)) == Array(entries[2...]))
        #expect(try h.reader.entries("todo", descending: true, after: ListKey(integer: 1)) == ["a"])
        #expect(try h.reader.listKeys("todo", holding: "a") == [ListKey(integer: 0), ListKey(integer: 5)])
        #expect(try h.reader.list("empty")?.count == 0)
        #expect(try h.reader.entries("empty") == [])
        #expect(try h.reader.record("todo") == nil, "lists and records are separate")

        // One entry in, one out: rows, not a rewritten list.
        let between = ListKey.between(ListKey(integer: 0), ListKey(integer: 1))
        try h.commit([.putList(list("todo", entries + ["z"], version: 2, seq: 2)),
                      .insertListEntry(list: "todo", ListRow(key: between, entry: "z")),
                      .deleteListEntries(list: "todo", [ListKey(integer: 5)])])
        #expect(try h.reader.entries("todo") == ["a", "z"] + Array(entries[1...4]))
        // A key the list has already fails the unit, and nothing of it stays.
        #expect(throws: StoreError.self) {
            try h.commit([.putList(list("todo", [], version: 3, seq: 3)),
                          .insertListEntry(list: "todo", ListRow(key: between, entry: "again"))])
        }
        h.store.resumeAfterFailure()
        #expect(try h.reader.list("todo")?.version == 2)

        try h.commit(putList("todo", ["b"], version: 3, seq: 3))
        #expect(try h.reader.entries("todo") == ["b"])
        try h.commit([.deleteList("todo")])
        #expect(try h.reader.list("todo") == nil)
        #expect(try h.reader.entries("todo") == [])
        #expect(try h.reader.state().listCount == 1)
    }

    /// Names are compared by their bytes: canonically equivalent spellings are
    /// two records, and order is UTF-8 byte order.
    @Test(arguments: Backend.allCases)
    func namesAreBytes(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        try h.commit([.putRecord(record(composed, version: 1)), .putRecord(record(decomposed, version: 2))])
        #expect(try h.reader.record(composed)?.version == 1)
        #expect(try h.reader.record(decomposed)?.version == 2)
        #expect(try h.reader.records(prefix: "caf", after: nil, limit: 10).map(\.version) == [2, 1],
                "e (0x65) sorts before é (0xC3)")
    }

    @Test(arguments: Backend.allCases)
    func prefixScansOrderAndPage(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let names = ["b", "a0", "a/2", "a", "a/", "a/10", "a/1", "ab", "\u{1F600}", "\u{FF21}", "A"]
        try h.commit(names.map { .putRecord(record($0)) })

        let all = try h.reader.records(prefix: "", after: nil, limit: 100).map(\.name)
        #expect(all == ["A", "a", "a/", "a/1", "a/10", "a/2", "a0", "ab", "b", "\u{FF21}", "\u{1F600}"])
        // "/" is 0x2F and "0" is 0x30: the "a/" prefix ends right before "a0".
        #expect(try h.reader.records(prefix: "a/", after: nil, limit: 100).map(\.name) == ["a/", "a/1", "a/10", "a/2"])
        #expect(try h.reader.records(prefix: "a0", after: nil, limit: 100).map(\.name) == ["a0"])
        #expect(try h.reader.records(prefix: "zz", after: nil, limit: 100).isEmpty)

        // Paging with `after`, whatever page size.
        for pageSize in 1...4 {
            var pages: [String] = []
            var after: String?
            while true {
                let page = try h.reader.records(prefix: "a", after: after, limit: pageSize).map(\.name)
                pages += page
                guard page.count == pageSize else { break }
                after = page.last
            }
            #expect(pages == ["a", "a/", "a/1", "a/10", "a/2", "a0", "ab"], "page size \(pageSize)")
        }
        // `after` below the prefix, inside it but not a name, and past it.
        #expect(try h.reader.records(prefix: "a/", after: "0", limit: 10).map(\.name) == ["a/", "a/1", "a/10", "a/2"])
        #expect(try h.reader.records(prefix: "a/", after: "a/0", limit: 10).map(\.name) == ["a/1", "a/10", "a/2"])
        #expect(try h.reader.records(prefix: "a/", after: "a/2", limit: 10).isEmpty)
        #expect(try h.reader.records(prefix: "a/", after: "b", limit: 10).isEmpty)
        #expect(try h.reader.records(prefix: "", after: "b", limit: 10).map(\.name) == ["\u{FF21}", "\u{1F600}"])
        #expect(try h.reader.records(prefix: "", after: nil, limit: 0).isEmpty)

        try h.commit([.putList(list("a/x", [])), .putList(list("a0", [])), .putList(list("a/", []))])
        #expect(try h.reader.lists(prefix: "a/", after: nil, limit: 10).map(\.name) == ["a/", "a/x"])
        #expect(try h.reader.lists(prefix: "a/", after: "a/", limit: 10).map(\.name) == ["a/x"])
    }

    @Test(arguments: Backend.allCases)
    func changeQueries(backend: Backend) throws {
        let h = try StoreHarness(backend)
        try h.commit([.putRecord(record("a/1"))], changes: [change(1, .record, "a/1"), change(2, .list, "a/1")])
        try h.commit(changes: [change(3, .record, "a0"), change(4, .record, "a/2"), change(5, .record, "a/1")])
        try h.commit(changes: [change(6, .list, "a/1"), change(7, .record, "b")])

        let all = try h.reader.changes(after: 0, limit: 100)
        #expect(all.map(\.seq) == [1, 2, 3, 4, 5, 6, 7])
        #expect(all[1] == change(2, .list, "a/1"), "kind, name, time and message bytes come back unchanged")
        #expect(try h.reader.changes(after: 2, limit: 3).map(\.seq) == [3, 4, 5])
        #expect(try h.reader.changes(after: 7, limit: 3).isEmpty)

        #expect(try h.reader.changes(after: 0, kind: .record, name: "a/1", limit: 10).map(\.seq) == [1, 5])
        #expect(try h.reader.changes(after: 1, kind: .record, name: "a/1", limit: 10).map(\.seq) == [5])
        #expect(try h.reader.changes(after: 0, kind: .list, name: "a/1", limit: 1).map(\.seq) == [2])

        #expect(try h.reader.changes(after: 0, prefix: "a/", limit: 10).map(\.seq) == [1, 4, 5], "record changes only")
        #expect(try h.reader.changes(after: 4, prefix: "a/", limit: 10).map(\.seq) == [5])
        #expect(try h.reader.changes(after: 0, prefix: "a/", limit: 2).map(\.seq) == [1, 4])
        #expect(try h.reader.changes(after: 0, prefix: "", limit: 10).map(\.seq) == [1, 3, 4, 5, 7])

        let state = try h.reader.state()
        #expect(state.headSeq == 7)
        #expect(state.floorSeq == 0)
        #expect(state.changeCount == 7)
        #expect(state.recordCount == 1)
    }

    @Test(arguments: Backend.allCases)
    func idempotency(backend: Backend) throws {
        let h = try StoreHarness(backend)
        #expect(try h.reader.idempotency("k1") == nil)
        let first = StoredIdempotency(key: "k1", seq: 1, time: testNow, response: Array("{\"ok\":1}".utf8))
        try h.commit([.putRecord(record("r"))], changes: [change(1, .record, "r")], idempotency: first)
        #expect(try h.reader.idempotency("k1") == first)
        let second = StoredIdempotency(key: "k1", seq: 2, time: testNow + 1, response: [])
        try h.commit(idempotency: second)
        #expect(try h.reader.idempotency("k1") == second)
        #expect(try h.reader.idempotency("k2") == nil)
    }

    /// A unit without changes leaves the head alone; the outcome carries the head.
    @Test(arguments: Backend.allCases)
    func outcomesCarryTheHead(backend: Backend) throws {
        let h = try StoreHarness(backend)
        #expect(try h.commit(changes: [change(1, .record, "x"), change(2, .record, "x")]).lastSeq == 2)
        #expect(try h.commit([.putRecord(record("x"))]).lastSeq == 2)
        #expect(try h.reader.state().headSeq == 2)
    }
}
