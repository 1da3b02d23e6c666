import CSQLite

/// The error type a caller's SQLite failures are reported as: each owner of
/// a file (the mirror's store, the intake outbox) keeps its own, so its
/// functions keep one typed error for everything they do.
public protocol SQLiteFailure: Error {
    init(_ message: String)
}

/// One SQLite connection with one owner (the thread or queue that opened
/// it), its statements prepared once and reused. Every return code is
/// checked at once and becomes a `Failure` whose message names the file
/// (`label 'path'`), what SQLite said and the statement.
///
/// WAL with `synchronous=FULL`: "a transaction committed in WAL mode with
/// synchronous=FULL … is durable across a power loss"
/// (sqlite.org/pragma.html#pragma_synchronous). Several processes may use
/// one file at once (`mirror run` beside `mirror set`, two `intake resume`s),
/// so the connection waits for a lock held by another one instead of
/// failing (sqlite.org/c3ref/busy_timeout.html).
public final class SQLiteDatabase<Failure: SQLiteFailure> {
    private let db: OpaquePointer
    public let path: String
    /// How messages name the file ("mirror store", "intake outbox").
    public let label: String
    private var statements: [String: OpaquePointer] = [:]
    private var depth = 0

    /// Opens (creating) the file in WAL mode with `synchronous=FULL`.
    /// - Parameter busyTimeoutMillis: how long to wait for another
    ///   connection's lock before failing with SQLITE_BUSY.
    public init(path: String, label: String, busyTimeoutMillis: Int32) throws(Failure) {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            if let handle { sqlite3_close_v2(handle) }
            throw Failure("cannot open the \(label) '\(path)': \(message)")
        }
        db = handle
        self.path = path
        self.label = label
        do throws(Failure) {
            sqlite3_busy_timeout(db, busyTimeoutMillis)
            let mode = try query("PRAGMA journal_mode=WAL", cached: false).first?.first?.text ?? ""
            guard mode.lowercased() == "wal" else {
                throw Failure("cannot put the \(label) '\(path)' in WAL mode (journal_mode is \(mode))")
            }
            try execute("PRAGMA synchronous=FULL")
        } catch {
            sqlite3_close_v2(db)
            throw error
        }
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(db)
    }

    /// Runs one or more statements that return no rows (schema, PRAGMAs).
    public func execute(_ sql: String) throws(Failure) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(message)
            throw Failure("\(label) '\(path)': \(text) (in: \(sql.prefix(60)))")
        }
    }

    /// Runs one statement with `parameters` bound in order; the rows it
    /// returns. `cached`: keep the prepared statement for the next call
    /// with the same text (not for SQL built with values in it).
    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue] = [], cached: Bool = true) throws(Failure) -> [[SQLValue]] {
        let statement = try prepared(sql, cached: cached)
        defer {
            if cached {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            } else {
                sqlite3_finalize(statement)
            }
        }
        // SQLITE_TRANSIENT: SQLite copies the text before bind returns.
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for (index, value) in parameters.enumerated() {
            let position = Int32(index + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(statement, position)
            case .int(let int): rc = sqlite3_bind_int64(statement, position, int)
            case .real(let real): rc = sqlite3_bind_double(statement, position, real)
            case .text(let text): rc = sqlite3_bind_text(statement, position, text, -1, transient)
            }
            try check(rc, sql)
        }
        var rows: [[SQLValue]] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { return rows }
            guard rc == SQLITE_ROW else { try check(rc, sql); return rows }
            var row: [SQLValue] = []
            for column in 0..<sqlite3_column_count(statement) {
                switch sqlite3_column_type(statement, column) {
                case SQLITE_INTEGER: row.append(.int(sqlite3_column_int64(statement, column)))
                case SQLITE_FLOAT: row.append(.real(sqlite3_column_double(statement, column)))
                case SQLITE_NULL: row.append(.null)
                default:
                    if let text = sqlite3_column_text(statement, column) {
                        row.append(.text(String(cString: text)))
                    } else {
                        row.append(.null)
                    }
                }
            }
            rows.append(row)
        }
    }

    private func prepared(_ sql: String, cached: Bool) throws(Failure) -> OpaquePointer {
        if cached, let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v2(db, sql, -1, &statement, nil), sql)
        guard let statement else { throw Failure("\(label) '\(path)': empty statement \(sql.prefix(60))") }
        if cached { statements[sql] = statement }
        return statement
    }

    /// Runs `body` in one write transaction: BEGIN IMMEDIATE takes the write
    /// lock up front, so the transaction cannot fail halfway on a lock held
    /// by another process (sqlite.org/lang_transaction.html); rolled back if
    /// `body` throws. Nested calls join the outer transaction.
    public func transaction<R>(_ body: () throws(Failure) -> R) throws(Failure) -> R {
        if depth > 0 { return try body() }
        try execute("BEGIN IMMEDIATE")
        depth += 1
        defer { depth -= 1 }
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Changes when another connection commits (sqlite.org/pragma.html#pragma_data_version).
    public func dataVersion() throws(Failure) -> Int64 {
        // Prepared afresh each time: a kept PRAGMA statement answers the
        // value it was prepared with.
        try query("PRAGMA data_version", cached: false).first?.first?.int ?? 0
    }

    private func check(_ rc: Int32, _ sql: String) throws(Failure) {
        guard rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE else {
            throw Failure("\(label) '\(path)': \(String(cString: sqlite3_errmsg(db))) (in: \(sql.prefix(60)))")
        }
    }
}
