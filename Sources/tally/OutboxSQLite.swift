import CSQLite

/// Why the intake outbox could not be read or written; the message names
/// the file and the operation.
struct OutboxError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// A value bound to, or read from, an SQL statement.
enum SQLValue: Equatable {
    case null
    case int(Int64)
    case real(Double)
    case text(String)

    var int: Int64? { if case .int(let value) = self { return value } else { return nil } }
    var real: Double? {
        switch self {
        case .real(let value): return value
        case .int(let value): return Double(value)
        default: return nil
        }
    }
    var text: String? { if case .text(let value) = self { return value } else { return nil } }

    init(_ text: String?) { self = text.map { .text($0) } ?? .null }
    init(_ int: Int?) { self = int.map { .int(Int64($0)) } ?? .null }
}

/// The outbox's one SQLite connection, owned by the one thread of the CLI.
///
/// WAL with `synchronous=FULL`: "a transaction committed in WAL mode with
/// synchronous=FULL … is durable across a power loss" (sqlite.org/pragma.html
/// #pragma_synchronous), which is what "the last confirmed stage" needs.
final class OutboxSQLite {
    private let db: OpaquePointer
    let path: String

    init(path: String) throws(OutboxError) {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            if let handle { sqlite3_close_v2(handle) }
            throw OutboxError("cannot open the intake outbox '\(path)': \(message)")
        }
        db = handle
        self.path = path
        do throws(OutboxError) {
            // Another tally process may hold the write lock for a moment
            // (sqlite.org/c3ref/busy_timeout.html).
            sqlite3_busy_timeout(db, 10_000)
            let mode = try query("PRAGMA journal_mode=WAL").first?.first?.text ?? ""
            guard mode.lowercased() == "wal" else {
                throw OutboxError("cannot put the intake outbox '\(path)' in WAL mode (journal_mode is \(mode))")
            }
            try execute("PRAGMA synchronous=FULL")
        } catch {
            sqlite3_close_v2(db)
            throw error
        }
    }

    deinit { sqlite3_close_v2(db) }

    func execute(_ sql: String) throws(OutboxError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(message)
            throw OutboxError("intake outbox '\(path)': \(text) (in: \(sql.prefix(60)))")
        }
    }

    /// Runs one statement with `parameters` bound in order; the rows it returns.
    @discardableResult
    func query(_ sql: String, _ parameters: [SQLValue] = []) throws(OutboxError) -> [[SQLValue]] {
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v2(db, sql, -1, &statement, nil), sql)
        guard let statement else { return [] }
        defer { sqlite3_finalize(statement) }
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

    /// Runs `body` in one write transaction (BEGIN IMMEDIATE takes the write
    /// lock up front, so it cannot fail halfway on a lock,
    /// sqlite.org/lang_transaction.html); rolled back if `body` throws.
    func transaction<R>(_ body: () throws(OutboxError) -> R) throws(OutboxError) -> R {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func check(_ rc: Int32, _ sql: String) throws(OutboxError) {
        guard rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE else {
            throw OutboxError("intake outbox '\(path)': \(String(cString: sqlite3_errmsg(db))) (in: \(sql.prefix(60)))")
        }
    }
}
