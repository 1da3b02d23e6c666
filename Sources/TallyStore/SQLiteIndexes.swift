import TallySQLite
/// The record-index statements (schema version 4: `record_index`,
/// `record_indexes`), kept apart from the record and list statements: the
/// writer applies the index mutations of a unit with them, a reader answers
/// live queries' lookups.
struct SQLiteIndexWrites {
    private let upsert: SQLiteStatement
    private let delete: SQLiteStatement
    private let mark: SQLiteStatement
    private let dropRows: SQLiteStatement
    private let dropMark: SQLiteStatement

    init(_ c: SQLiteConnection) throws(StoreError) {
        upsert = try c.prepare("""
            INSERT INTO record_index(idx, value, name, updated) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT(idx, value, name) DO UPDATE SET updated = excluded.updated
            """, name: "write index entry")
        delete = try c.prepare("DELETE FROM record_index WHERE idx = ?1 AND value = ?2 AND name = ?3",
                               name: "delete index entry")
        mark = try c.prepare("INSERT OR IGNORE INTO record_indexes(idx) VALUES (?1)", name: "mark index built")
        dropRows = try c.prepare("DELETE FROM record_index WHERE idx = ?1", name: "drop index rows")
        dropMark = try c.prepare("DELETE FROM record_indexes WHERE idx = ?1", name: "drop index")
    }

    /// Applies an index mutation; false for any other kind.
    func apply(_ mutation: StoreMutation) throws(StoreError) -> Bool {
        switch mutation {
        case .putIndexEntry(let entry):
            try upsert.bind(1, text: entry.index)
            try upsert.bind(2, blob: entry.value)
            try upsert.bind(3, text: entry.name)
            try upsert.bind(4, entry.updated)
            try upsert.run()
        case .deleteIndexEntry(let index, let value, let name):
            try delete.bind(1, text: index)
            try delete.bind(2, blob: value)
            try delete.bind(3, text: name)
            try delete.run()
        case .markIndexBuilt(let index):
            try mark.bind(1, text: index)
            try mark.run()
        case .dropIndex(let index):
            try dropRows.bind(1, text: index)
            try dropRows.run()
            try dropMark.bind(1, text: index)
            try dropMark.run()
        case .putRecord, .deleteRecord, .putList, .deleteList, .insertListEntry, .deleteListEntries, .clearListEntries:
            return false
        }
        return true
    }
}

struct SQLiteIndexReads {
    private let built: SQLiteStatement
    private let byName: SQLiteStatement
    private let newest: SQLiteStatement
    private let oldest: SQLiteStatement

    init(_ c: SQLiteConnection) throws(StoreError) {
        built = try c.prepare("SELECT idx FROM record_indexes ORDER BY idx", name: "read built indexes")
        byName = try c.prepare("""
            SELECT name FROM record_index
            WHERE idx = ?1 AND value = ?2 AND name >= ?3 AND name < ?4 ORDER BY name LIMIT ?5
            """, name: "read index by name")
        // The prefix filter runs on the rows in update order: a query's
        // prefix is its index's (or a little narrower), so few are skipped.
        newest = try c.prepare("""
            SELECT name FROM record_index
            WHERE idx = ?1 AND value = ?2 AND name >= ?3 AND name < ?4
            ORDER BY updated DESC, name DESC LIMIT ?5
            """, name: "read index newest first")
        oldest = try c.prepare("""
            SELECT name FROM record_index
            WHERE idx = ?1 AND value = ?2 AND name >= ?3 AND name < ?4
            ORDER BY updated, name LIMIT ?5
            """, name: "read index oldest first")
    }

    func builtIndexes() throws(StoreError) -> [String] {
        defer { built.reset() }
        var ids: [String] = []
        while try built.step() { ids.append(built.text(0)) }
        return ids
    }

    func names(index: String, value: [UInt8], range: NameRange, order: Order?, limit: Int) throws(StoreError) -> [String] {
        guard limit > 0, !range.isEmpty else { return [] }
        let s: SQLiteStatement
        switch order {
        case nil: s = byName
        case .newestFirst?: s = newest
        case .oldestFirst?: s = oldest
        }
        try s.bind(1, text: index)
        try s.bind(2, blob: value)
        try s.bind(3, textBytes: range.lower)
        if let upper = range.upper { try s.bind(4, textBytes: upper) } else { try s.bindAboveAllText(4) }
        try s.bind(5, Int64(limit))
        defer { s.reset() }
        var names: [String] = []
        while try s.step() { names.append(s.text(0)) }
        return names
    }

    enum Order { case newestFirst, oldestFirst }
}
