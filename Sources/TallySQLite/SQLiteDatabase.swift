import CSQLite

/// The error type a caller's SQLite failures are reported as: each owner of
/// a file (the mirror's store, the intake outbox) keeps its own, so its
/// functions keep one typed error for everything they do.
public protocol SQLiteFailure: Error {
    init(_ message: String)
}

/// The CLI's own files (the mirror's store, the intake outbox) on one
/// `SQLiteConnection` with one owner (the thread or queue that opened it):
/// rows as `SQLValue`s, statements prepared once and reused, transactions.
/// Every failure becomes a `Failure` whose message names the file
/// (`label 'path'`), what SQLite said and the statement.
///
/// WAL with `synchronous=FULL`: "a transaction committed in WAL mode with
/// synchronous=FULL … is durable across a power loss"
/// (sqlite.org/pragma.html#pragma_synchronous). Several processes may use
/// one file at once (`mirror run` beside `mirror set`, two `intake resume`s),
/// so the connection waits for a lock held by another one instead of
/// failing (sqlite.org/c3ref/busy_timeout.html).
public final class SQLiteDatabase<Failure: SQLiteFailure> {
    private let connection: SQLiteConnection
    public var path: String { connection.path }
    /// How messages name the file ("mirror store", "intake outbox").
    public let label: String
    private var statements: [String: SQLiteStatement] = [:]
    private var depth = 0

    /// Opens (creating) the file in WAL mode with `synchronous=FULL`.
    /// - Parameter busyTimeoutMillis: how long to wait for another
    ///   connection's lock before failing with SQLITE_BUSY.
    public init(path: String, label: String, busyTimeoutMillis: Int32) throws(Failure) {
        do {
            connection = try SQLiteConnection(path: path, role: .writer, synchronous: .full,
                                              busyTimeoutMillis: busyTimeoutMillis)
        } catch {
            throw Failure("cannot open the \(label) '\(path)': \(error.message)")
        }
        self.label = label
    }

    /// Runs one or more statements that return no rows (schema, PRAGMAs).
    public func execute(_ sql: String) throws(Failure) {
        do {
            try connection.execute(sql)
        } catch {
            throw failure(error, sql)
        }
    }

    /// Runs one statement with `parameters` bound in order; the rows it
    /// returns. `cached`: keep the prepared statement for the next call
    /// with the same text (not for SQL built with values in it).
    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue] = [], cached: Bool = true) throws(Failure) -> [[SQLValue]] {
        do {
            guard cached else {
                return try connection.withStatement(sql) { statement throws(SQLiteError) in
                    try Self.rows(of: statement, parameters)
                }
            }
            let statement: SQLiteStatement
            if let kept = statements[sql] {
                statement = kept
            } else {
                statement = try connection.prepare(sql, name: String(sql.prefix(60)))
                statements[sql] = statement
            }
            defer { statement.reset() }
            return try Self.rows(of: statement, parameters)
        } catch {
            throw failure(error, sql)
        }
    }

    private static func rows(of statement: SQLiteStatement, _ parameters: [SQLValue]) throws(SQLiteError) -> [[SQLValue]] {
        for (index, value) in parameters.enumerated() {
            let position = Int32(index + 1)
            switch value {
            case .null: try statement.bindNull(position)
            case .int(let int): try statement.bind(position, int)
            case .real(let real): try statement.bind(position, real)
            case .text(let text): try statement.bind(position, text: text)
            }
        }
        var rows: [[SQLValue]] = []
        while try statement.step() {
            var row: [SQLValue] = []
            for column in 0..<statement.columnCount {
                switch statement.columnType(column) {
                case SQLITE_INTEGER: row.append(.int(statement.int64(column)))
                case SQLITE_FLOAT: row.append(.real(statement.double(column)))
                case SQLITE_NULL: row.append(.null)
                default: row.append(.text(statement.text(column)))
                }
            }
            rows.append(row)
        }
        return rows
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

    private func failure(_ error: SQLiteError, _ sql: String) -> Failure {
        Failure("\(label) '\(path)': \(error.message) (in: \(sql.prefix(60)))")
    }
}
