@preconcurrency import Glibc
import CSQLite
import TallyProtocol
import TallyConcurrency
import TallySQLite

/// The write connection and everything the writer thread does with it:
/// apply batches of units in one transaction, keep the meta row current,
/// prune by retention, signal the checkpointer.
///
/// Created on the opening thread (so that opening errors reach the caller),
/// then owned by the writer thread alone from `willRun` to `finish`.
final class SQLiteWriter: CommitBackend {
    /// The meta rows, mirrored in memory: read once at open, written in the
    /// same transaction as the units that change them.
    struct Meta: Equatable {
        var head: Int64
        var floor: Int64
        var changeCount: Int64
        /// Bytes of the change log's messages.
        var changeBytes: Int64
    }

    /// BEGIN IMMEDIATE waits `busyTimeoutMillis` per attempt; after this many
    /// attempts the batch is reported as failed.
    static let maxBusyAttempts = 10

    let connection: SQLiteConnection
    private let checkpointer: SQLiteCheckpointer
    let diagnostics: LockedValueBox<StoreDiagnostics>
    private let hooks: StoreTestHooks
    var policy: RetentionPolicy
    var meta: Meta

    let begin: SQLiteStatement
    let commit: SQLiteStatement
    private let rollback: SQLiteStatement
    private let upsertRecord: SQLiteStatement
    private let deleteRecord: SQLiteStatement
    private let upsertList: SQLiteStatement
    private let deleteList: SQLiteStatement
    private let listWrites: SQLiteListWrites
    private let insertChange: SQLiteStatement
    private let upsertIdempotency: SQLiteStatement
    private let writeMeta: SQLiteStatement
    private let indexWrites: SQLiteIndexWrites
    let changeSeqAtOffset: SQLiteStatement
    let oldestChanges: SQLiteStatement
    let deleteChangesThrough: SQLiteStatement
    let countAllChanges: SQLiteStatement
    let oldestChangeSizes: SQLiteStatement
    let bytesThrough: SQLiteStatement
    let sumAllBytes: SQLiteStatement
    let deleteOldIdempotency: SQLiteStatement

    init(connection: SQLiteConnection, checkpointer: SQLiteCheckpointer, diagnostics: LockedValueBox<StoreDiagnostics>,
         retention: StoreRetention, clock: StoreClock, hooks: StoreTestHooks) throws(StoreError) {
        self.connection = connection
        self.checkpointer = checkpointer
        self.diagnostics = diagnostics
        self.hooks = hooks
        policy = RetentionPolicy(retention: retention, clock: clock)
        meta = try Self.readMeta(connection)
        let c = connection
        // BEGIN IMMEDIATE takes the write lock at once, so a busy database is
        // found (and retried) before any work is done (sqlite.org/lang_transaction.html).
        begin = try c.prepare("BEGIN IMMEDIATE", name: "begin")
        commit = try c.prepare("COMMIT", name: "commit")
        rollback = try c.prepare("ROLLBACK", name: "rollback")
        upsertRecord = try c.prepare("""
            INSERT INTO records(name, version, seq, created, updated, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
                created = excluded.created, updated = excluded.updated, data = excluded.data
            """, name: "put record")
        deleteRecord = try c.prepare("DELETE FROM records WHERE name = ?1", name: "delete record")
        upsertList = try c.prepare("""
            INSERT INTO lists(name, version, seq, created, updated, count) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
                created = excluded.created, updated = excluded.updated, count = excluded.count
            """, name: "put list")
        deleteList = try c.prepare("DELETE FROM lists WHERE name = ?1", name: "delete list")
        listWrites = try SQLiteListWrites(c, blockSize: hooks.listBlockSize ?? SQLiteListWrites.defaultBlockSize)
        insertChange = try c.prepare(
            "INSERT INTO changes(seq, time, kind, name, message) VALUES (?1, ?2, ?3, ?4, ?5)",
            name: "insert change")
        upsertIdempotency = try c.prepare("""
            INSERT INTO idempotency(key, seq, time, response) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, time = excluded.time, response = excluded.response
            """, name: "put idempotency")
        // One row per statement: a statement that may change several rows
        // inside a transaction opens a statement journal ("a statement
        // journal is used … for an UPDATE or DELETE that might change more
        // than one row", sqlite.org/tempfiles.html), whose allocation and
        // release per commit cost more than the update itself.
        writeMeta = try c.prepare("UPDATE meta SET value = ?2 WHERE key = ?1", name: "write meta")
        indexWrites = try SQLiteIndexWrites(c)
        changeSeqAtOffset = try c.prepare("SELECT seq FROM changes ORDER BY seq LIMIT 1 OFFSET ?1",
                                          name: "find prune limit by count")
        oldestChanges = try c.prepare("SELECT seq, time FROM changes ORDER BY seq LIMIT ?1",
                                      name: "find prune limit by age")
        deleteChangesThrough = try c.prepare("DELETE FROM changes WHERE seq <= ?1", name: "prune changes")
        countAllChanges = try c.prepare("SELECT count(*) FROM changes", name: "count changes")
        // length() of a BLOB comes from the record header: the bytes are not read.
        oldestChangeSizes = try c.prepare("SELECT seq, length(message) FROM changes ORDER BY seq LIMIT ?1",
                                          name: "find prune limit by bytes")
        bytesThrough = try c.prepare("SELECT coalesce(sum(length(message)), 0) FROM changes WHERE seq <= ?1",
                                     name: "measure pruned changes")
        sumAllBytes = try c.prepare("SELECT coalesce(sum(length(message)), 0) FROM changes",
                                    name: "measure the change log")
        deleteOldIdempotency = try c.prepare("""
            DELETE FROM idempotency WHERE key IN
                (SELECT key FROM idempotency WHERE time < ?1 ORDER BY time LIMIT ?2)
            """, name: "prune idempotency")
    }

    static func readMeta(_ connection: SQLiteConnection) throws(StoreError) -> Meta {
        try readMeta(connection.prepare("SELECT key, value FROM meta", name: "read meta"))
    }

    /// Reads the meta rows with `statement` (`SELECT key, value FROM meta`).
    static func readMeta(_ statement: SQLiteStatement) throws(StoreError) -> Meta {
        defer { statement.reset() }
        var meta = Meta(head: 0, floor: 0, changeCount: 0, changeBytes: 0)
        while try statement.step() {
            switch statement.text(0) {
            case "head_seq": meta.head = statement.int64(1)
            case "floor_seq": meta.floor = statement.int64(1)
            case "change_count": meta.changeCount = statement.int64(1)
            case "change_bytes": meta.changeBytes = statement.int64(1)
            default: break
            }
        }
        return meta
    }

    var headSeq: Int64 { meta.head }

    /// A pragma's value on the write connection (tests, before the writer starts).
    func pragma(_ name: String) throws(StoreError) -> Int64 {
        try connection.queryInt("PRAGMA \(name)")
    }

    // MARK: Lifecycle (writer thread)

    func willRun() {
        do throws(StoreError) {
            try checkpointer.start()
            // Order matters: the pragma installs SQLite's own WAL hook, which our hook then
            // replaces (sqlite.org/c3ref/wal_autocheckpoint.html: the two "override each other").
            try connection.execute("PRAGMA wal_autocheckpoint=0")
            sqlite3_wal_hook(connection.db, { context, _, _, pages in
                Unmanaged<SQLiteCheckpointer>.fromOpaque(context!).takeUnretainedValue().walDidGrow(pages: pages)
                return SQLITE_OK
            }, Unmanaged.passUnretained(checkpointer).toOpaque())
        } catch {
            // No checkpointer thread: SQLite's automatic checkpoints (still on) keep the WAL bounded.
            diagnostics.withLock { d in
                d.checkpointFailures += 1
                d.lastCheckpointError = error
            }
        }
    }

    func finish() {
        sqlite3_wal_hook(connection.db, nil, nil)
        connection.close()
        checkpointer.stop()
    }

    // MARK: Commits

    func apply(_ units: ArraySlice<StoreUnit>, waitForLocks: Bool) -> ApplyResult {
        guard waitForLocks else {
            // A borrowing thread must not sleep in SQLite's busy handler: one
            // try, and a lock held elsewhere is the writer's to wait for.
            sqlite3_busy_timeout(connection.db, 0)
            defer { sqlite3_busy_timeout(connection.db, connection.busyTimeoutMillis) }
            return applyOnce(units)
        }
        var attempt = 1
        while true {
            let result = applyOnce(units)
            if case .failed(_, let error) = result, error.isBusy, attempt < Self.maxBusyAttempts {
                attempt += 1
                usleep(1_000)
                continue
            }
            return result
        }
    }

    private func applyOnce(_ units: ArraySlice<StoreUnit>) -> ApplyResult {
        do throws(StoreError) {
            try begin.run()
        } catch {
            return .failed(unitIndex: nil, error)
        }
        var next = meta
        for index in units.indices {
            do throws(StoreError) {
                try apply(units[index], to: &next)
            } catch {
                rollBack()
                // A busy database is nobody's fault: the whole batch is retried.
                return .failed(unitIndex: error.isBusy ? nil : index, error)
            }
        }
        do throws(StoreError) {
            if next != meta { try write(next) }
            if let hook = hooks.beforeCommit { hook(units.map(\.token)) }
            if let error = hooks.failCommit?(units.map(\.token)) { throw error }
            try commit.run()
        } catch {
            rollBack()
            return .failed(unitIndex: nil, error)
        }
        meta = next
        return .committed(lastSeq: meta.head)
    }

    private func apply(_ unit: StoreUnit, to next: inout Meta) throws(StoreError) {
        for index in unit.mutations.indices {
            switch unit.mutations[index] {
            case .putRecord(let record):
                try upsertRecord.bind(1, text: record.name)
                try upsertRecord.bind(2, record.version)
                try upsertRecord.bind(3, record.seq)
                try upsertRecord.bind(4, record.created)
                try upsertRecord.bind(5, record.updated)
                try upsertRecord.bind(6, blob: record.data)
                try upsertRecord.run()
            case .deleteRecord(let name):
                try deleteRecord.bind(1, text: name)
                try deleteRecord.run()
            case .putList(let list):
                try upsertList.bind(1, text: list.name)
                try upsertList.bind(2, list.version)
                try upsertList.bind(3, list.seq)
                try upsertList.bind(4, list.created)
                try upsertList.bind(5, list.updated)
                try upsertList.bind(6, list.count)
                try upsertList.run()
            case .deleteList(let name):
                try deleteList.bind(1, text: name)
                try deleteList.run()
                try listWrites.clear(name)
            case .insertListEntry(let list, let row):
                try listWrites.insert(list, row)
            case .deleteListEntries(let list, let keys):
                for key in keys { try listWrites.delete(list, key) }
            case .clearListEntries(let list):
                try listWrites.clear(list)
            case .putIndexEntry, .deleteIndexEntry, .markIndexBuilt, .dropIndex:
                _ = try indexWrites.apply(unit.mutations[index])
            }
            if let error = hooks.afterMutation?(unit.token, index) { throw error }
        }
        for change in unit.changes {
            try insertChange.bind(1, change.seq)
            try insertChange.bind(2, change.time)
            try insertChange.bind(3, change.kind.storedValue)
            try insertChange.bind(4, text: change.name)
            try insertChange.bind(5, blob: change.message)
            try insertChange.run()
            next.head = max(next.head, change.seq)
            next.changeCount += 1
            next.changeBytes += Int64(change.message.count)
        }
        if let idempotency = unit.idempotency {
            try upsertIdempotency.bind(1, text: idempotency.key)
            try upsertIdempotency.bind(2, idempotency.seq)
            try upsertIdempotency.bind(3, idempotency.time)
            try upsertIdempotency.bind(4, blob: idempotency.response)
            try upsertIdempotency.run()
        }
    }

    /// Writes the meta values that differ from the committed ones.
    func write(_ next: Meta) throws(StoreError) {
        func put(_ key: String, _ value: Int64) throws(StoreError) {
            try writeMeta.bind(1, text: key)
            try writeMeta.bind(2, value)
            try writeMeta.run()
        }
        if next.head != meta.head { try put("head_seq", next.head) }
        if next.floor != meta.floor { try put("floor_seq", next.floor) }
        if next.changeCount != meta.changeCount { try put("change_count", next.changeCount) }
        if next.changeBytes != meta.changeBytes { try put("change_bytes", next.changeBytes) }
    }

    /// Ends a failed transaction. After some errors SQLite has rolled back
    /// already ("If certain kinds of errors occur within a transaction, the
    /// transaction may or may not be rolled back automatically",
    /// sqlite.org/lang_transaction.html), hence the check.
    func rollBack() {
        guard connection.inTransaction else { return }
        do throws(StoreError) {
            try rollback.run()
        } catch {
            // Nothing better to do: the next BEGIN will fail and report it.
        }
    }
}

extension EntityKind {
    /// The `kind` column: 0 record, 1 list.
    var storedValue: Int64 {
        switch self {
        case .record: 0
        case .list: 1
        }
    }

    init?(storedValue: Int64) {
        switch storedValue {
        case 0: self = .record
        case 1: self = .list
        default: return nil
        }
    }
}
