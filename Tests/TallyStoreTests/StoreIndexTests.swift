import Testing
@testable import TallyStore

private func entry(_ name: String, _ value: String, updated: Int64, index: String = "orders/\u{1F}stage") -> StoredIndexEntry {
    StoredIndexEntry(index: index, value: Array(value.utf8), name: name, updated: updated)
}

/// Record indexes (schema 4), one body for both backends: rows by value in
/// name order or by update time, moved and dropped with their units.
@Suite struct StoreIndexTests {
    @Test(arguments: Backend.allCases)
    func rowsAreReadByValueInNameOrderAndPaged(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let ready = "\"ready\""
        try h.commit([
            .putIndexEntry(entry("orders/b", ready, updated: 5)),
            .putIndexEntry(entry("orders/a", ready, updated: 9)),
            .putIndexEntry(entry("orders/c", "\"received\"", updated: 1)),
            .putIndexEntry(entry("other/x", ready, updated: 1)),
            .putIndexEntry(entry("orders/z", ready, updated: 3, index: "orders/\u{1F}owner")),
        ])
        let value = Array(ready.utf8)
        #expect(try h.reader.indexedNames(index: "orders/\u{1F}stage", value: value, prefix: "orders/", after: nil,
                                          limit: 10) == ["orders/a", "orders/b"])
        #expect(try h.reader.indexedNames(index: "orders/\u{1F}stage", value: value, prefix: "orders/", after: "orders/a",
                                          limit: 10) == ["orders/b"])
        #expect(try h.reader.indexedNames(index: "orders/\u{1F}stage", value: value, prefix: "", after: nil,
                                          limit: 2) == ["orders/a", "orders/b"])
        #expect(try h.reader.indexedNamesByUpdate(index: "orders/\u{1F}stage", value: value, prefix: "orders/",
                                                  newestFirst: true, limit: 10) == ["orders/a", "orders/b"])
        #expect(try h.reader.indexedNamesByUpdate(index: "orders/\u{1F}stage", value: value, prefix: "",
                                                  newestFirst: false, limit: 2) == ["other/x", "orders/b"])
    }

    @Test(arguments: Backend.allCases)
    func aRowMovesWithItsValueAndAnIndexIsDroppedWhole(backend: Backend) throws {
        let h = try StoreHarness(backend)
        let index = "orders/\u{1F}stage"
        try h.commit([.putIndexEntry(entry("orders/a", "\"received\"", updated: 1)), .markIndexBuilt(index)])
        #expect(try h.reader.builtIndexes() == [index])
        try h.commit([.deleteIndexEntry(index: index, value: Array("\"received\"".utf8), name: "orders/a"),
                      .putIndexEntry(entry("orders/a", "\"ready\"", updated: 2))])
        #expect(try h.reader.indexedNames(index: index, value: Array("\"received\"".utf8), prefix: "", after: nil,
                                          limit: 10) == [])
        // A second put of the same row moves its time, not a second row.
        try h.commit([.putIndexEntry(entry("orders/a", "\"ready\"", updated: 7))])
        #expect(try h.reader.indexedNamesByUpdate(index: index, value: Array("\"ready\"".utf8), prefix: "",
                                                  newestFirst: true, limit: 10) == ["orders/a"])
        try h.commit([.dropIndex(index)])
        #expect(try h.reader.builtIndexes() == [])
        #expect(try h.reader.indexedNames(index: index, value: Array("\"ready\"".utf8), prefix: "", after: nil,
                                          limit: 10) == [])
    }

    @Test(arguments: Backend.allCases)
    func unitsAppliedBeforeStartAreReadAndRefusedAfter(backend: Backend) throws {
        let h = try StoreHarness(backend, start: false)
        try h.store.applyBeforeStart([StoreUnit(mutations: [.markIndexBuilt("x")], token: 0)])
        #expect(try h.reader.builtIndexes() == ["x"])
        h.startWriter()
        #expect(throws: StoreError.self) {
            try h.store.applyBeforeStart([StoreUnit(mutations: [.markIndexBuilt("y")], token: 0)])
        }
    }
}
