import CSQLite
import TallyProtocol
import TallySQLite

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
    private let listKeysOfEntry: SQLiteStatement
    /// Statements for list cursors, by direction and whether they start
    /// after a key; a cursor borrows one and gives it back reset.
    private var idleListStatements: [ListScan: [SQLiteStatement]] = [:]
    private let commit: SQLiteStatement
    private let indexReads: SQLiteIndexReads
    private let listRanks: SQLiteListRanks

    init(path: String, durability: Durability) throws(StoreError) {
        let c = try SQLiteConnection(path: path, role: .reader, synchronous: durability.synchronous)
        connection = c
        recordByName = try c.prepare(
            "SELECT version, seq, created, updated, data FROM records WHERE name = ?1", name: "read record")
        listByName = try c.prepare(
            "SELECT version, seq, created, updated, count FROM lists WHERE name = ?1", name: "read list")
        listKeysOfEntry = try c.prepare(
            "SELECT pos FROM list_entries WHERE list = ?1 AND entry = ?2 ORDER BY pos", name: "find list entry")
        // Ranges instead of LIKE 'prefix%': "name >= ? AND name < ?" is a primary key range
        // (see NameRange).
        recordsInRange = try c.prepare("""
            SELECT name, version, seq, created, updated, data FROM records
            WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3
            """, name: "scan records")
        listsInRange = try c.prepare("""
            SELECT name, version, seq, created, updated, count FROM lists
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
        listRanks = try SQLiteListRanks(c)
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
                          updated: s.int64(3), count: s.int64(4))
    }

    func listEntries(_ name: String, descending: Bool, after: ListKey?) throws(StoreError) -> any StoredListCursor {
        let scan = ListScan(descending: descending, bounded: after != nil)
        let s: SQLiteStatement
        if let idle = idleListStatements[scan]?.popLast() {
            s = idle
        } else {
            let order = descending ? "DESC" : "ASC"
            let bound = after == nil ? "" : descending ? " AND pos < ?2" : " AND pos > ?2"
            s = try connection.prepare(
                "SELECT pos, entry FROM list_entries WHERE list = ?1\(bound) ORDER BY pos \(order)",
                name: "scan list entries")
        }
        try s.bind(1, text: name)
        if let after { try s.bind(2, blob: after.bytes) }
        return SQLiteListCursor(statement: s) { [weak self] statement in
            self?.idleListStatements[scan, default: []].append(statement)
        }
    }

    func listKeys(_ name: String, holding entry: String) throws(StoreError) -> [ListKey] {
        let s = listKeysOfEntry
        try s.bind(1, text: name)
        try s.bind(2, text: entry)
        defer { s.reset() }
        var keys: [ListKey] = []
        while try s.step() { keys.append(ListKey(bytes: s.blob(0))) }
        return keys
    }

    func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(StoreError) -> (below: Int, held: [Bool]) {
        try inReadTransaction { () throws(StoreError) in try listRanks.rank(name, below: key, holding: keys) }
    }

    func listEntry(_ name: String, at index: Int) throws(StoreError) -> ListRow? {
        try inReadTransaction { () throws(StoreError) in try listRanks.entry(name, at: index) }
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
            result.append(StoredList(name: s.text(0), version: s.int64(1), seq: s.int64(2), created: s.int64(3),
                                     updated: s.int64(4), count: s.int64(5)))
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
        try inReadTransaction { () throws(StoreError) in
            let meta = try SQLiteWriter.readMeta(self.meta)
            let records = try count(countRecords)
            let lists = try count(countLists)
            return StoreState(headSeq: meta.head, floorSeq: meta.floor, recordCount: records, listCount: lists,
                              changeCount: Int(clamping: meta.changeCount), changeBytes: Int(clamping: meta.changeBytes))
        }
    }

    /// Runs `body`'s statements in one read transaction: they see one point in time.
    private func inReadTransaction<R>(_ body: () throws(StoreError) -> R) throws(StoreError) -> R {
        try begin.run()
        do throws(StoreError) {
            let result = try body()
            try commit.run()
            return result
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

/// Which list-scan statement a cursor needs.
struct ListScan: Hashable {
    var descending: Bool
    var bounded: Bool
}

/// Steps one statement over a list's entries. The statement is reset (its
/// read snapshot released) as soon as it is exhausted, or when the cursor
/// goes away: a statement left running would keep the reader on an old
/// snapshot.
final class SQLiteListCursor: StoredListCursor {
    private var statement: SQLiteStatement?
    private let giveBack: (SQLiteStatement) -> Void

    init(statement: SQLiteStatement, giveBack: @escaping (SQLiteStatement) -> Void) {
        self.statement = statement
        self.giveBack = giveBack
    }

    func next() throws(StoreError) -> ListRow? {
        guard let s = statement else { return nil }
        do throws(StoreError) {
            if try s.step() { return ListRow(key: ListKey(bytes: s.blob(0)), entry: s.text(1)) }
        } catch {
            release()
            throw error
        }
        release()
        return nil
    }

    private func release() {
        guard let s = statement else { return }
        statement = nil
        s.reset()
        giveBack(s)
    }

    deinit { release() }
}
