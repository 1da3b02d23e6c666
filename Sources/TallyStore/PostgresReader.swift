import CSQLite
import TallyPostgres
import TallyProtocol

/// Reads through its own PostgreSQL connection, one owner thread.
///
/// Every read is one statement outside any explicit transaction, so it
/// sees what was committed before it started: "a SELECT query … sees only
/// data committed before the query began" (Read Committed, "Transaction
/// Isolation" in the PostgreSQL manual). Reads that must agree with each
/// other (a rank and which keys are held; the state's head and counts) are
/// one statement with subqueries, which share one snapshot.
final class PostgresReader: SharedStoreReading {
    let connection: PostgresConnection

    init(url: String) throws(StoreError) {
        do throws(PostgresError) {
            connection = try PostgresConnection(url: url, options: PostgresStore.connectionOptions(role: "reader"))
        } catch {
            throw StoreError(error)
        }
    }

    /// Runs a statement and turns failures into `StoreError`s. A read is
    /// one statement outside any transaction, so one that found the
    /// connection lost (a server restart, a terminated session) is tried
    /// once more on a new session; a server still away fails it.
    func rows(_ statement: PostgresStatement, _ parameters: [PostgresValue] = []) throws(StoreError) -> PostgresResult {
        do throws(PostgresError) {
            if !connection.isConnected { try connection.reconnect() }
            do throws(PostgresError) {
                return try connection.execute(statement, parameters)
            } catch where error.isConnectionLost {
                try connection.reconnect()
                return try connection.execute(statement, parameters)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Reads row fields, turning a mismatch into a `StoreError`.
    func read<R>(_ body: () throws(PostgresError) -> R) throws(StoreError) -> R {
        do throws(PostgresError) {
            return try body()
        } catch {
            throw StoreError(error)
        }
    }

    func record(_ name: String) throws(StoreError) -> StoredRecord? {
        let result = try rows(Statements.recordByName, [.bytea(Array(name.utf8))])
        guard let r = result.first else { return nil }
        return try read { () throws(PostgresError) in
            StoredRecord(name: name, version: try r.int64(0), seq: try r.int64(1), created: try r.int64(2),
                         updated: try r.int64(3), data: try r.bytes(4))
        }
    }

    func list(_ name: String) throws(StoreError) -> StoredList? {
        let result = try rows(Statements.listByName, [.bytea(Array(name.utf8))])
        guard let r = result.first else { return nil }
        return try read { () throws(PostgresError) in
            StoredList(name: name, version: try r.int64(0), seq: try r.int64(1), created: try r.int64(2),
                       updated: try r.int64(3), count: try r.int64(4))
        }
    }

    func listEntries(_ name: String, descending: Bool, after: ListKey?) throws(StoreError) -> any StoredListCursor {
        PostgresListCursor(reader: self, list: Array(name.utf8), descending: descending, after: after?.bytes)
    }

    func listKeys(_ name: String, holding entry: String) throws(StoreError) -> [ListKey] {
        let result = try rows(Statements.listKeysOfEntry, [.bytea(Array(name.utf8)), .bytea(Array(entry.utf8))])
        return try read { () throws(PostgresError) in
            try result.map { row throws(PostgresError) in ListKey(bytes: try row.bytes(0)) }
        }
    }

    /// Through counted blocks, in one statement (one snapshot): O(n / 1,024
    /// + 2,048 + k log n), as in SQLite.
    func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(StoreError) -> (below: Int, held: [Bool]) {
        let result = try rows(Statements.rank, [.bytea(Array(name.utf8)), .bytea(key.bytes), .byteaArray(keys.map(\.bytes))])
        return try read { () throws(PostgresError) in
            let row = try result.firstRow()
            guard case .byteaArray(let found) = try row.value(1) else {
                throw PostgresError(kind: .usage, message: "column 1 is not a bytea[]", operation: "rank list entry")
            }
            let held = Set(found)
            return (Int(try row.int64(0)), keys.map { held.contains($0.bytes) })
        }
    }

    /// Through counted blocks: O(n / 1,024 + log n).
    func listEntry(_ name: String, at index: Int) throws(StoreError) -> ListRow? {
        guard index >= 0 else { return nil }
        let result = try rows(Statements.entryAt, [.bytea(Array(name.utf8)), .int8(Int64(index))])
        guard let row = result.first else { return nil }
        return try read { () throws(PostgresError) in
            ListRow(key: ListKey(bytes: try row.bytes(0)), entry: String(decoding: try row.bytes(1), as: UTF8.self))
        }
    }

    func records(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredRecord] {
        let range = NameRange(prefix: prefix, after: after)
        guard limit > 0, !range.isEmpty else { return [] }
        let result = try rows(Statements.recordsInRange, Self.bounds(range) + [.int8(Int64(limit))])
        return try read { () throws(PostgresError) in
            try result.map { r throws(PostgresError) in
                StoredRecord(name: String(decoding: try r.bytes(0), as: UTF8.self), version: try r.int64(1),
                             seq: try r.int64(2), created: try r.int64(3), updated: try r.int64(4), data: try r.bytes(5))
            }
        }
    }

    func lists(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredList] {
        let range = NameRange(prefix: prefix, after: after)
        guard limit > 0, !range.isEmpty else { return [] }
        let result = try rows(Statements.listsInRange, Self.bounds(range) + [.int8(Int64(limit))])
        return try read { () throws(PostgresError) in
            try result.map { r throws(PostgresError) in
                StoredList(name: String(decoding: try r.bytes(0), as: UTF8.self), version: try r.int64(1),
                           seq: try r.int64(2), created: try r.int64(3), updated: try r.int64(4), count: try r.int64(5))
            }
        }
    }

    func changes(after: Int64, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        return try readChanges(rows(Statements.changesAfter, [.int8(after), .int8(Int64(limit))]))
    }

    func changesWithPriors(after: Int64, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        let result = try rows(Statements.changesWithPriors, [.int8(after), .int8(Int64(limit))])
        var changes = try readChanges(result)
        for index in changes.indices {
            let bytes = try read { () throws(PostgresError) in result[index].isNull(5) ? nil : try result[index].bytes(5) }
            guard let bytes else { continue }
            guard let prior = StoredRecord(name: changes[index].name, priorBytes: bytes) else {
                throw StoreError(code: SQLITE_CORRUPT, message: "a prior record of \(bytes.count) bytes at seq \(changes[index].seq)",
                                 operation: result.operation)
            }
            changes[index].prior = prior
        }
        return changes
    }

    func changes(after: Int64, kind: EntityKind, name: String, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        return try readChanges(rows(Statements.changesOfEntity, [.int8(kind.storedValue), .bytea(Array(name.utf8)),
                                                                 .int8(after), .int8(Int64(limit))]))
    }

    func changes(after: Int64, prefix: String, limit: Int) throws(StoreError) -> [StoredChange] {
        guard limit > 0 else { return [] }
        let range = NameRange(prefix: prefix, after: nil)
        return try readChanges(rows(Statements.changesInRange, Self.bounds(range) + [.int8(after), .int8(Int64(limit))]))
    }

    func idempotency(_ key: String) throws(StoreError) -> StoredIdempotency? {
        let result = try rows(Statements.idempotencyByKey, [.bytea(Array(key.utf8))])
        guard let r = result.first else { return nil }
        return try read { () throws(PostgresError) in
            StoredIdempotency(key: key, seq: try r.int64(0), time: try r.int64(1), response: try r.bytes(2))
        }
    }

    func builtIndexes() throws(StoreError) -> [String] {
        try names(rows(Statements.builtIndexes))
    }

    func indexedNames(index: String, value: [UInt8], prefix: String, after: String?,
                      limit: Int) throws(StoreError) -> [String] {
        let range = NameRange(prefix: prefix, after: after)
        guard limit > 0, !range.isEmpty else { return [] }
        return try names(rows(Statements.indexByName, [.bytea(Array(index.utf8)), .bytea(value)] + Self.bounds(range)
                              + [.int8(Int64(limit))]))
    }

    func indexedNamesByUpdate(index: String, value: [UInt8], prefix: String, newestFirst: Bool,
                              limit: Int) throws(StoreError) -> [String] {
        let range = NameRange(prefix: prefix, after: nil)
        guard limit > 0, !range.isEmpty else { return [] }
        return try names(rows(newestFirst ? Statements.indexNewest : Statements.indexOldest,
                              [.bytea(Array(index.utf8)), .bytea(value)] + Self.bounds(range) + [.int8(Int64(limit))]))
    }

    /// The head, floor and log counters, and the record and list counts
    /// (O(n): see `StoreState`), from one statement's snapshot.
    func state() throws(StoreError) -> StoreState {
        let result = try rows(Statements.state)
        return try read { () throws(PostgresError) in
            let r = try result.firstRow()
            return StoreState(headSeq: try r.int64(0), floorSeq: try r.int64(1), recordCount: Int(try r.int64(4)),
                              listCount: Int(try r.int64(5)), changeCount: Int(clamping: try r.int64(2)),
                              changeBytes: Int(clamping: try r.int64(3)))
        }
    }

    func sequenceBounds() throws(StoreError) -> (head: Int64, floor: Int64) {
        let result = try rows(PostgresWriter.Statements.readMeta)
        return try read { () throws(PostgresError) in
            let r = try result.firstRow()
            return (try r.int64(0), try r.int64(1))
        }
    }

    // MARK: Helpers

    /// A name range as two bytea parameters. No upper bound becomes 0xFF,
    /// a byte no UTF-8 string holds: every name sorts below it.
    private static func bounds(_ range: NameRange) -> [PostgresValue] {
        [.bytea(range.lower), .bytea(range.upper ?? [0xFF])]
    }

    private func names(_ result: PostgresResult) throws(StoreError) -> [String] {
        try read { () throws(PostgresError) in
            try result.map { row throws(PostgresError) in String(decoding: try row.bytes(0), as: UTF8.self) }
        }
    }

    private func readChanges(_ result: PostgresResult) throws(StoreError) -> [StoredChange] {
        var changes: [StoredChange] = []
        changes.reserveCapacity(result.count)
        for r in result {
            let (seq, stored) = try read { () throws(PostgresError) in (try r.int64(0), try r.int64(2)) }
            guard let kind = EntityKind(storedValue: stored) else {
                throw StoreError(code: SQLITE_CORRUPT, message: "unknown kind \(stored) at seq \(seq)",
                                 operation: result.operation)
            }
            changes.append(try read { () throws(PostgresError) in
                StoredChange(seq: seq, time: try r.int64(1), kind: kind, name: String(decoding: try r.bytes(3), as: UTF8.self),
                             message: try r.bytes(4))
            })
        }
        return changes
    }
}

/// Reads a list's entries in pages of `pageSize` rows, each page from the
/// last key read (keyset paging on the primary key): O(log n) to the first
/// row of a page, and no server-side cursor or transaction held open
/// between calls. Each page is its own snapshot, so a list that changes
/// while it is read shows the change from the next page on.
final class PostgresListCursor: StoredListCursor {
    static let pageSize = 256

    private let reader: PostgresReader
    private let list: [UInt8]
    private let descending: Bool
    private var after: [UInt8]?
    private var page: [ListRow] = []
    private var position = 0
    private var exhausted = false

    init(reader: PostgresReader, list: [UInt8], descending: Bool, after: [UInt8]?) {
        self.reader = reader
        self.list = list
        self.descending = descending
        self.after = after
    }

    func next() throws(StoreError) -> ListRow? {
        if position == page.count {
            guard !exhausted else { return nil }
            try fetch()
            guard !page.isEmpty else { return nil }
        }
        defer { position += 1 }
        return page[position]
    }

    private func fetch() throws(StoreError) {
        let statement: PostgresStatement
        var parameters: [PostgresValue] = [.bytea(list)]
        switch (descending, after) {
        case (false, nil): statement = PostgresReader.Statements.entriesAscending
        case (true, nil): statement = PostgresReader.Statements.entriesDescending
        case (false, let key?): statement = PostgresReader.Statements.entriesAscendingAfter; parameters.append(.bytea(key))
        case (true, let key?): statement = PostgresReader.Statements.entriesDescendingAfter; parameters.append(.bytea(key))
        }
        parameters.append(.int8(Int64(Self.pageSize)))
        let result = try reader.rows(statement, parameters)
        page = try reader.read { () throws(PostgresError) in
            try result.map { row throws(PostgresError) in
                ListRow(key: ListKey(bytes: try row.bytes(0)), entry: String(decoding: try row.bytes(1), as: UTF8.self))
            }
        }
        position = 0
        exhausted = page.count < Self.pageSize
        after = page.last?.key.bytes ?? after
    }
}
