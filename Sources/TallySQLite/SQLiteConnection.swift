@preconcurrency import Glibc
import CSQLite

/// One SQLite connection with one owner thread, and the statements prepared
/// on it: the one SQLite wrapper in Sources. The hub's store (TallyStore)
/// uses it directly for its writer, readers and checkpointer; the CLI's own
/// files (the mirror's store, the intake outbox) through `SQLiteDatabase`.
///
/// Opened with SQLITE_OPEN_NOMUTEX: "the database connection … [is] in the
/// multi-thread threading mode … as long as no single database connection
/// is used simultaneously in two or more threads" (sqlite.org/threadsafe.html),
/// which confinement to one thread guarantees, so SQLite's own per-connection
/// mutex would be pure cost.
package final class SQLiteConnection {
    package enum Role {
        /// Creates the file; sets WAL mode and runs migrations.
        case writer
        /// Never writes (`PRAGMA query_only`).
        case reader
        /// Runs checkpoints only.
        case checkpointer
    }

    /// `PRAGMA synchronous`: when commits and checkpoints fsync
    /// (sqlite.org/pragma.html#pragma_synchronous).
    package enum Synchronous: String, Sendable {
        /// An fsync of the WAL per commit: "a transaction committed in WAL
        /// mode with synchronous=FULL … is durable across a power loss".
        case full = "FULL"
        /// No fsync per commit; the last commits may be lost on power loss.
        case normal = "NORMAL"
        /// No fsync at all; a power loss may corrupt the database.
        case off = "OFF"
    }

    /// How long a statement waits for a lock held by another connection
    /// before failing with SQLITE_BUSY, unless the opener says otherwise.
    package static let busyTimeoutMillis: Int32 = 5_000

    package let db: OpaquePointer
    package let path: String
    /// The busy timeout this connection was opened with.
    package let busyTimeoutMillis: Int32
    private var statements: [SQLiteStatement] = []
    package private(set) var isOpen = true

    package init(path: String, role: Role, synchronous: Synchronous,
                 busyTimeoutMillis: Int32 = SQLiteConnection.busyTimeoutMillis) throws(SQLiteError) {
        var handle: OpaquePointer?
        var flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX
        if case .writer = role { flags |= SQLITE_OPEN_CREATE }
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            let system = handle.map { sqlite3_system_errno($0) } ?? 0
            if let handle { sqlite3_close_v2(handle) }
            throw SQLiteError(code: rc, message: message, operation: "open \(path)", systemErrno: system)
        }
        db = handle
        self.path = path
        self.busyTimeoutMillis = busyTimeoutMillis
        do throws(SQLiteError) {
            // SQLite opens a file it may not write read-only, without an error
            // (sqlite.org/c3ref/open.html): the first write would fail with a
            // bare "attempt to write a readonly database". Say why now.
            if role != .reader, sqlite3_db_readonly(db, "main") == 1 {
                let reason = access(path, W_OK) == 0 ? EACCES : errno
                throw SQLiteError(code: SQLITE_READONLY, message: "the file is not writable: \(String(cString: strerror(reason)))",
                                 operation: "open \(path)", systemErrno: reason)
            }
            try check(sqlite3_extended_result_codes(db, 1), "enable extended result codes")
            // Every connection waits for locks instead of failing at once (sqlite.org/c3ref/busy_timeout.html).
            try check(sqlite3_busy_timeout(db, busyTimeoutMillis), "set busy timeout")
            if case .writer = role {
                // WAL: readers do not block the writer and the writer does not block readers;
                // the mode is persistent, stored in the file (sqlite.org/wal.html).
                let mode = try queryText("PRAGMA journal_mode=WAL")
                guard mode.lowercased() == "wal" else {
                    throw SQLiteError(code: SQLITE_ERROR, message: "journal_mode is \(mode), not wal",
                                     operation: "set journal_mode=WAL")
                }
            }
            // synchronous is per connection; the checkpointer's setting decides whether
            // checkpoints sync, the writer's whether commits do.
            try execute("PRAGMA synchronous=\(synchronous.rawValue)")
            if case .reader = role { try execute("PRAGMA query_only=1") }
        } catch {
            close()
            throw error
        }
    }

    deinit {
        close()
    }

    /// Finalizes every statement and closes the connection. Idempotent.
    package func close() {
        guard isOpen else { return }
        isOpen = false
        for statement in statements { sqlite3_finalize(statement.handle) }
        statements.removeAll()
        // close_v2 never fails for open statements (there are none left); a failed close
        // leaves nothing we could do better.
        sqlite3_close_v2(db)
    }

    /// Prepares a statement that lives as long as the connection.
    package func prepare(_ sql: String, name: String) throws(SQLiteError) -> SQLiteStatement {
        var handle: OpaquePointer?
        // SQLITE_PREPARE_PERSISTENT: "the prepared statement will be retained for a long time
        // and probably reused many times" (sqlite.org/c3ref/c_prepare_normalize.html).
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &handle, nil)
        guard rc == SQLITE_OK, let handle else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db)), operation: "prepare \(name)")
        }
        let statement = SQLiteStatement(handle: handle, db: db, name: name)
        statements.append(statement)
        return statement
    }

    /// Runs SQL text (one or more statements, no parameters, rows ignored).
    package func execute(_ sql: String) throws(SQLiteError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        guard rc == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(db))
            sqlite3_free(message)
            throw SQLiteError(code: rc, message: text, operation: sql, systemErrno: sqlite3_system_errno(db))
        }
    }

    /// The first column of the first row of a one-off query (pragmas).
    package func queryInt(_ sql: String) throws(SQLiteError) -> Int64 {
        try withStatement(sql) { statement throws(SQLiteError) in
            try statement.firstRow(sql).int64(0)
        }
    }

    package func queryText(_ sql: String) throws(SQLiteError) -> String {
        try withStatement(sql) { statement throws(SQLiteError) in
            try statement.firstRow(sql).text(0)
        }
    }

    /// Prepares `sql` for `body` only (SQL with values in it, or a PRAGMA
    /// whose answer a kept statement would not refresh), then finalizes it.
    package func withStatement<R>(_ sql: String, _ body: (SQLiteStatement) throws(SQLiteError) -> R) throws(SQLiteError) -> R {
        let statement = try oneOff(sql)
        defer { sqlite3_finalize(statement.handle) }
        return try body(statement)
    }

    private func oneOff(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var handle: OpaquePointer?
        let rc = sqlite3_prepare_v2(db, sql, -1, &handle, nil)
        guard rc == SQLITE_OK, let handle else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db)), operation: sql)
        }
        return SQLiteStatement(handle: handle, db: db, name: sql)
    }

    /// Whether a transaction is open (after a failed statement SQLite may or
    /// may not have rolled it back already).
    package var inTransaction: Bool { sqlite3_get_autocommit(db) == 0 }

    package func check(_ rc: Int32, _ operation: String) throws(SQLiteError) {
        guard rc == SQLITE_OK else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db)), operation: operation,
                             systemErrno: sqlite3_system_errno(db))
        }
    }
}
