import TallyConcurrency
import TallyProtocol

/// Reads a MemoryStore's tables under their lock: every call sees whole
/// committed batches only.
final class MemoryReader: StoreReading {
    private let tables: LockedValueBox<MemoryTables>

    init(tables: LockedValueBox<MemoryTables>) {
        self.tables = tables
    }

    func record(_ name: String) throws(StoreError) -> StoredRecord? {
        tables.withLock { $0.records[ByteName(name)] }
    }

    func list(_ name: String) throws(StoreError) -> StoredList? {
        tables.withLock { $0.lists[ByteName(name)] }
    }

    func listEntries(_ name: String, descending: Bool, after: ListKey?) throws(StoreError) -> any StoredListCursor {
        let rows = tables.withLock { $0.listEntries[ByteName(name)] ?? [] }
        var range = rows.indices
        if let after {
            let start = MemoryTables.index(in: rows, notBelow: after)
            let past = start < rows.count && rows[start].key == after ? start + 1 : start
            range = descending ? 0..<start : past..<rows.count
        }
        return MemoryListCursor(rows, range: range, descending: descending)
    }

    func listKeys(_ name: String, holding entry: String) throws(StoreError) -> [ListKey] {
        tables.withLock { t in
            (t.listEntries[ByteName(name)] ?? []).filter { $0.entry.sameBytes(as: entry) }.map(\.key)
        }
    }

    func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(StoreError) -> (below: Int, held: [Bool]) {
        tables.withLock { t in
            let rows = t.listEntries[ByteName(name)] ?? []
            let held = keys.map { key in
                let index = MemoryTables.index(in: rows, notBelow: key)
                return index < rows.count && rows[index].key == key
            }
            return (MemoryTables.index(in: rows, notBelow: key), held)
        }
    }

    func listEntry(_ name: String, at index: Int) throws(StoreError) -> ListRow? {
        tables.withLock { t in
            let rows = t.listEntries[ByteName(name)] ?? []
            return rows.indices.contains(index) ? rows[index] : nil
        }
    }

    func records(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredRecord] {
        let range = NameRange(prefix: prefix, after: after)
        return tables.withLock { t in
            Self.scan(t.recordNames, range, limit) { t.records[$0] }
        }
    }

    func lists(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredList] {
        let range = NameRange(prefix: prefix, after: after)
        return tables.withLock { t in
            Self.scan(t.listNames, range, limit) { t.lists[$0] }
        }
    }

    private static func scan<Value>(_ names: SortedNames, _ range: NameRange, _ limit: Int,
                                    _ value: (ByteName) -> Value?) -> [Value] {
        var result: [Value] = []
        guard limit > 0, !range.isEmpty else { return result }
        var index = names.firstIndex(notBelow: range.lower)
        while index < names.names.count && result.count < limit {
            let name = names.names[index]
            if range.isPastEnd(name.string.utf8) { break }
            if let found = value(name) { result.append(found) }
            index += 1
        }
        return result
    }

    func changes(after: Int64, limit: Int) throws(StoreError) -> [StoredChange] {
        tables.withLock { $0.changes.changes(after: after, limit: limit) }
    }

    func changes(after: Int64, kind: EntityKind, name: String, limit: Int) throws(StoreError) -> [StoredChange] {
        let wanted = ByteName(name)
        return tables.withLock { t in
            t.changes.changes(after: after, limit: limit) { $0.kind == kind && ByteName($0.name) == wanted }
        }
    }

    func changes(after: Int64, prefix: String, limit: Int) throws(StoreError) -> [StoredChange] {
        let range = NameRange(prefix: prefix, after: nil)
        return tables.withLock { t in
            t.changes.changes(after: after, limit: limit) { $0.kind == .record && range.contains($0.name.utf8) }
        }
    }

    func idempotency(_ key: String) throws(StoreError) -> StoredIdempotency? {
        tables.withLock { $0.idempotency[ByteName(key)] }
    }

    func builtIndexes() throws(StoreError) -> [String] {
        tables.withLock { $0.builtIndexes.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
    }

    func indexedNames(index: String, value: [UInt8], prefix: String, after: String?,
                      limit: Int) throws(StoreError) -> [String] {
        let range = NameRange(prefix: prefix, after: after)
        let rows = tables.withLock { $0.indexes[index]?[value] ?? [:] }
        return rows.keys.filter { range.contains($0.string.utf8) }.map(\.string)
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.prefix(max(limit, 0)).map { $0 }
    }

    func indexedNamesByUpdate(index: String, value: [UInt8], prefix: String, newestFirst: Bool,
                              limit: Int) throws(StoreError) -> [String] {
        let range = NameRange(prefix: prefix, after: nil)
        let rows = tables.withLock { $0.indexes[index]?[value] ?? [:] }
        let sorted = rows.filter { range.contains($0.key.string.utf8) }.sorted { a, b in
            if a.value != b.value { return newestFirst ? a.value > b.value : a.value < b.value }
            let ordered = a.key.string.utf8.lexicographicallyPrecedes(b.key.string.utf8)
            return newestFirst ? !ordered : ordered
        }
        return sorted.prefix(max(limit, 0)).map(\.key.string)
    }

    func sequenceBounds() throws(StoreError) -> (head: Int64, floor: Int64) {
        tables.withLock { ($0.head, $0.floor) }
    }

    func state() throws(StoreError) -> StoreState {
        tables.withLock { t in
            StoreState(headSeq: t.head, floorSeq: t.floor, recordCount: t.records.count, listCount: t.lists.count,
                       changeCount: t.changes.count, changeBytes: t.changes.bytes)
        }
    }
}

/// A list's rows as they were under the lock (the array is shared, not
/// copied, until the writer changes it): a snapshot, as a SQLite
/// statement's is.
final class MemoryListCursor: StoredListCursor {
    private let rows: [ListRow]
    private var range: Range<Int>
    private let descending: Bool

    init(_ rows: [ListRow], range: Range<Int>, descending: Bool) {
        self.rows = rows
        self.range = range
        self.descending = descending
    }

    func next() throws(StoreError) -> ListRow? {
        guard !range.isEmpty else { return nil }
        if descending {
            range = range.lowerBound..<range.upperBound - 1
            return rows[range.upperBound]
        }
        range = range.lowerBound + 1..<range.upperBound
        return rows[range.lowerBound - 1]
    }
}
