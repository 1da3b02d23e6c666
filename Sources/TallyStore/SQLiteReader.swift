import CSQLite

/// Reads through its own connection, one owner thread.
///
/// Every read is one statement outside any explicit transaction, so it runs
/// in its own read transaction and sees the latest committed state: in WAL
/// mode "the reader … sees all the transactions that were committed before
/// the read transaction started" (sqlite.org/isolation.html). Statements are
/// reset right after use so no snapshot is held between calls. `state()`
/// reads several rows and wraps them in one read transaction.
final class SQLiteReader: StoreReading {
    let connection: SQLiteConnection
    private let recordByName: SQLiteStatement
    private let listByName: SQLiteStatement
    private let recordsInRange: SQLiteStatement
    private let listsInRange: SQLiteStatement
    private let changesAfter: SQLiteStatement
    private let changesOfEntity: SQLiteStatement
    private let changesInRange: SQLiteStatement
    private let idempotencyByKey: SQLiteStatement
    private let meta: SQLiteStatement
    private let countRecords: SQLiteStatement
    private let countLists: SQLiteStatement
    private let begin: SQLiteStatement
    private let commit: SQLiteStatement
    private let indexReads: SQLiteIndexReads

    init(path: String, durability: Durability) throws(StoreError) {
        let c = try SQLiteConnection(path: path, role: .reader, durability: durability)
        connection = c
        recordByName = try c.prepare(
            "SELECT version, seq, created, updated, data FROM records WHERE name = ?1", name: "read record")
        listByName = try c.prepare(
            "SELECT version, seq, created, updated, entries FROM lists WHERE name = ?1", name: "read list")
        // Ranges instead of LIKE 'prefix%': "name >= ? AND name < ?" is a primary key range
        // (see NameRange).
        recordsInRange = try c.prepare("""
            SELECT name, version, seq, created, updated, data FROM records
            WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3
            """, name: "scan records")
        listsInRange = try c.prepare("""
            SELECT name, version, seq, created, updated, entries FROM lists
            WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3
            """, name: "scan lists")
        changesAfter = try c.prepare(
            "SELECT seq, time, kind, name, message FROM changes WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            name: "read changes")
        changesOfEntity = try c.prepare("""
            SELECT seq, time, kind, name, message FROM changes
            WHERE kind = ?1 AND name = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4
            """, name: "read entity changes")
        changesInRange = try c.prepare("""
            SELECT seq, time, kind, name, message FROM changes
            WHERE kind = 0 AND name >= ?1 AND name < ?2 AND seq > ?3 ORDER BY seq LIMIT ?4
            """, name: "read prefix changes")
        idempotencyByKey = try c.prepare(
            "SELECT seq, time, response FROM idempotency WHERE key = ?1", name: "read idempotency")
        meta = try c.prepare("SELECT key, value FROM meta", name: "read meta")
        countRecords = try c.prepare("SELECT count(*) FROM records", name: "count records")
        countLists = try c.prepare("SELECT count(*) FROM lists", name: "count lists")
        begin = try c.prepare("BEGIN", name: "begin read")
        commit = try c.prepare("COMMIT", name: "end read")
        indexReads = try SQLiteIndexReads(c)
    }

    func record(_ name: String) throws(StoreError) -> StoredRecord? {
        let s = recordByName
        try s.bind(1, text: name)
        defer { s.reset() }
        guard try s.step() else { return nil }
        return StoredRecord(name: name, version: s.int64(0), seq: s.int64(1), created: s.int64(2),
                            updated: s.int64(3), data: s.blob(4))
    }

    func list(_ name: String) throws(StoreError) -> StoredList? {
        let s = listByName
        try s.bind(1, text: name)
        defer { s.reset() }
        guard try s.step() else { return nil }
        return StoredList(name: name, version: s.int64(0), seq: s.int64(1), created: s.int64(2),
                          updated: s.int64(3), entries: try s.withBlob(4) { bytes throws(StoreError) in
                              try ListEntriesCodec.decode(bytes)
                          })
    }

    func records(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredRecord] {
        let range = NameRange(prefix: prefix, after: after)
        guard limit > 0, !range.isEmpty else { return [] }
        let s = recordsInRange
        try bind(range, to: s)
        try s.bind(3, Int64(limit))
        defer { s.reset() }
        var result: [StoredRecord] = []
        while try s.step() {
            result.append(StoredRecord(name: s.text(0), version: s.int64(1), seq: s.int64(2), created: s.int64(3),
                                       updated: s.int64(4), data: s.blob(5)))
        }
        return result
    }

    func lists(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredList] {
        let range = NameRange(prefix: prefix, after: after)
        guard limit > 0, !range.isEmpty else { return [] }
        let s = listsInRange
        try bind(range, to: s)
        try s.bind(3, Int64(limit))
        defer { s.reset() }
        var result: [StoredList] = []
        while try s.step() {
            let entries = try s.withBlob(5) { bytes throws(StoreError) in try ListEntriesCodec.decode(bytes) }
            result.append(StoredList(name: s.text(0), version: s.int64(1), seq: s.int64(2), created: s.int64(3),
                                     updated: s.int64(4), entries: entries))
        }
        return result
    }

    func changes(after: Int64, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        let s = changesAfter
        try s.bind(1, after)
        try s.bind(2, Int64(limit))
        return try readChanges(s)
    }

    func changes(after: Int64, kind: EntityKind, name: String, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        let s = changesOfEntity
        try s.bind(1, kind.storedValue)
        try s.bind(2, text: name)
        try s.bind(3, after)
        try s.bind(4, Int64(limit))
        return try readChanges(s)
    }

    func changes(after: Int64, prefix: String, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        let s = changesInRange
        try bind(NameRange(prefix: prefix, after: nil), to: s)
        try s.bind(3, after)
        try s.bind(4, Int64(limit))
        return try readChanges(s)
    }

    func idempotency(_ key: String) throws(StoreError) -> StoredIdempotency? {
        let s = idempotencyByKey
        try s.bind(1, text: key)
        defer { s.reset() }
        guard try s.step() else { return nil }
        return StoredIdempotency(key: key, seq: s.int64(0), time: s.int64(1), response: s.blob(2))
    }

    func builtIndexes() throws(StoreError) -> [String] { try indexReads.builtIndexes() }

    func indexedNames(index: String, value: [UInt8], prefix: String, after: String?,
                      limit: Int) throws(StoreError) -> [String] {
        try indexReads.names(index: index, value: value, range: NameRange(prefix: prefix, after: after), order: nil,
                             limit: limit)
    }

    func indexedNamesByUpdate(index: String, value: [UInt8], prefix: String, newestFirst: Bool,
                              limit: Int) throws(StoreError) -> [String] {
        try indexReads.names(index: index, value: value, range: NameRange(prefix: prefix, after: nil),
                             order: newestFirst ? .newestFirst : .oldestFirst, limit: limit)
    }

    /// Reads the meta rows and counts the records and lists (O(n): see
    /// `StoreState`), all in one read transaction.
    func state() throws(StoreError) -> StoreState {
        try begin.run()
        do throws(StoreError) {
            let meta = try SQLiteWriter.readMeta(self.meta)
            let records = try count(countRecords)
            let lists = try count(countLists)
            try commit.run()
            return StoreState(headSeq: meta.head, floorSeq: meta.floor, recordCount: records, listCount: lists,
                              changeCount: Int(clamping: meta.changeCount), changeBytes: Int(clamping: meta.changeBytes))
        } catch {
            if connection.inTransaction { try? commit.run() }
            throw error
        }
    }

    func sequenceBounds() throws(StoreError) -> (head: Int64, floor: Int64) {
        let meta = try SQLiteWriter.readMeta(self.meta)
        return (meta.head, meta.floor)
    }

    // MARK: Helpers

    private func bind(_ range: NameRange, to s: SQLiteStatement) throws(StoreError) {
        try s.bind(1, textBytes: range.lower)
        if let upper = range.upper {
            try s.bind(2, textBytes: upper)
        } else {
            try s.bindAboveAllText(2)
        }
    }

    private func readChanges(_ s: SQLiteStatement) throws(StoreError) -> [StoredChange] {
        defer { s.reset() }
        var result: [StoredChange] = []
        while try s.step() {
            guard let kind = EntityKind(storedValue: s.int64(2)) else {
                throw StoreError(code: SQLITE_CORRUPT, message: "unknown kind \(s.int64(2)) at seq \(s.int64(0))",
                                 operation: s.name)
            }
            result.append(StoredChange(seq: s.int64(0), time: s.int64(1), kind: kind, name: s.text(3),
                                       message: s.blob(4)))
        }
        return result
    }

    private func count(_ s: SQLiteStatement) throws(StoreError) -> Int {
        defer { s.reset() }
        guard try s.step() else { return 0 }
        return Int(s.int64(0))
    }
}
