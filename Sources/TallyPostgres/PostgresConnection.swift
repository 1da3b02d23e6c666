@preconcurrency import Glibc
import CLibPQ

/// One PostgreSQL connection (a libpq `PGconn`) with one owner thread, and
/// the statements prepared on it: the base the PostgreSQL store will stand on.
///
/// "One thread restriction is that no two threads attempt to manipulate the
/// same PGconn object at the same time" (libpq manual, "Behavior in Threaded
/// Programs"): the connection is not Sendable and is used by the thread that
/// made it — a store's writer, a listener, a reader. Every call blocks that
/// thread until the server answers; only `waitForNotifications` waits with a
/// timeout and can be woken from another thread (`PostgresWaker`).
///
/// Parameters are sent and rows received in binary (`PostgresValue`,
/// `PostgresResult`). Every failure is a `PostgresError` naming the
/// statement; a broken connection stays broken (`isConnectionLost`) until
/// `reconnect()`, which also prepares statements again on use and repeats
/// the connection's LISTENs.
package final class PostgresConnection {
    package struct Options: Sendable {
        /// libpq's connect_timeout: the most seconds a connection attempt
        /// waits per host ("values less than 2 are rounded up to 2" says the
        /// libpq manual, so that is the floor).
        package var connectTimeoutSeconds = 5
        /// Shown in `pg_stat_activity.application_name`.
        package var applicationName = "tally"
        /// TCP keepalives: a server whose machine vanished without closing
        /// the connection is noticed after idle + interval × count seconds
        /// (25 s by default), not after the kernel's two hours.
        package var keepaliveIdleSeconds = 10
        package var keepaliveIntervalSeconds = 5
        package var keepaliveCount = 3
        /// tcp_user_timeout: a statement sent to a server that stopped
        /// acknowledging fails after this long instead of after the kernel's
        /// ~15 minutes of retransmissions.
        package var tcpUserTimeoutMillis = 30_000
        /// The server ends this session when it sits inside a transaction
        /// for longer (`idle_in_transaction_session_timeout`, set for the
        /// session through the `options` keyword): a process that stops
        /// holding a lock — frozen, paused, cut off without a reset — then
        /// holds up other sessions only that long. Nil: the server's setting.
        package var idleInTransactionTimeoutMillis: Int?

        package init() {}
    }

    /// Transaction isolation ("Transaction Isolation" in the PostgreSQL manual).
    package enum Isolation: String, Sendable {
        case readCommitted = "READ COMMITTED"
        case repeatableRead = "REPEATABLE READ"
        case serializable = "SERIALIZABLE"
    }

    package let url: PostgresURL
    package let options: Options
    let handle: OpaquePointer
    private let notices = NoticeLog()
    private(set) var isClosed = false
    /// Statement → its server-side name, for this server session.
    private var prepared: [PostgresStatement: String] = [:]
    private var preparedCount = 0
    private var inTransactionScope = false
    /// The channels this connection LISTENs on, repeated after a reconnect.
    package internal(set) var channels: Set<String> = []

    /// Connects, blocking for at most `options.connectTimeoutSeconds` per host.
    package init(url: PostgresURL, options: Options = Options()) throws(PostgresError) {
        self.url = url
        self.options = options
        var pairs = url.keywords
        let given = Set(pairs.map(\.0))
        func setDefault(_ keyword: String, _ value: String) {
            if !given.contains(keyword) { pairs.append((keyword, value)) }
        }
        setDefault("connect_timeout", String(options.connectTimeoutSeconds))
        setDefault("application_name", options.applicationName)
        // Text parameters and rows are UTF-8 whatever the server's encoding.
        setDefault("client_encoding", "UTF8")
        setDefault("keepalives", "1")
        setDefault("keepalives_idle", String(options.keepaliveIdleSeconds))
        setDefault("keepalives_interval", String(options.keepaliveIntervalSeconds))
        setDefault("keepalives_count", String(options.keepaliveCount))
        setDefault("tcp_user_timeout", String(options.tcpUserTimeoutMillis))
        if let idle = options.idleInTransactionTimeoutMillis {
            setDefault("options", "-c idle_in_transaction_session_timeout=\(idle)")
        }
        // expand_dbname 0: the database name is a name, never parsed as a
        // connection string of its own.
        let connection = Self.withCStrings(pairs.map(\.0)) { keywords in
            Self.withCStrings(pairs.map(\.1)) { values in PQconnectdbParams(keywords, values, 0) }
        }
        guard let connection else {
            throw PostgresError(kind: .connection, message: "libpq could not allocate a connection",
                                operation: "connect", server: url.description)
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.tidy(PQerrorMessage(connection))
            PQfinish(connection)
            throw PostgresError(kind: .connection, message: message, operation: "connect to \(url)", server: url.description)
        }
        handle = connection
        installNoticeReceiver()
    }

    /// Parses `url` first (a bad one is a `.usage` error saying what to fix).
    package convenience init(url: String, options: Options = Options()) throws(PostgresError) {
        try self.init(url: PostgresURL(parsing: url), options: options)
    }

    deinit {
        if !isClosed { PQfinish(handle) }
    }

    /// Ends the session. Idempotent; every later call fails as `.usage`.
    package func close() {
        guard !isClosed else { return }
        isClosed = true
        PQfinish(handle)
    }

    // MARK: State

    /// libpq's status is CONNECTION_OK. A connection that broke reads false
    /// only once libpq has noticed (a statement or a wait failed).
    package var isConnected: Bool { !isClosed && PQstatus(handle) == CONNECTION_OK }

    /// The server process serving this session: a notification's `senderPID`
    /// equals it when this connection sent the notification.
    package var backendPID: Int32 { isClosed ? 0 : PQbackendPID(handle) }

    /// For example 150018 for 15.18.
    package var serverVersion: Int32 { isClosed ? 0 : PQserverVersion(handle) }

    /// Inside a transaction block (PQtransactionStatus INTRANS or INERROR).
    package var inTransaction: Bool {
        guard !isClosed else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// The last notice or warning the server sent (not printed anywhere).
    package var lastNotice: PostgresNotice? { notices.last }

    // MARK: Statements

    /// Runs one statement with `parameters` ($1, $2, …) through
    /// PQexecParams: parsed and planned on every call; for statements run
    /// often, declare a `PostgresStatement`.
    @discardableResult
    package func query(_ sql: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> PostgresResult {
        let operation = Self.summary(sql)
        let encoded = try EncodedParameters(parameters, operation: operation)
        return try run(operation) { handle in
            encoded.withPointers { count, values, lengths, formats in
                encoded.types.withUnsafeBufferPointer { types in
                    PQexecParams(handle, sql, count, types.baseAddress, values, lengths, formats, 1)
                }
            }
        }
    }

    /// Runs a declared statement, preparing it on this session first if needed.
    @discardableResult
    package func execute(_ statement: PostgresStatement, _ parameters: [PostgresValue] = []) throws(PostgresError) -> PostgresResult {
        try statement.check(parameters)
        let encoded = try EncodedParameters(parameters, operation: statement.name)
        let name = try preparedName(of: statement)
        return try run(statement.name) { handle in
            encoded.withPointers { count, values, lengths, formats in
                PQexecPrepared(handle, name, count, values, lengths, formats, 1)
            }
        }
    }

    /// Runs SQL text without parameters, several statements at once if need
    /// be (schema, SET): PQexec, the simple query protocol. Rows are dropped.
    package func execute(script sql: String) throws(PostgresError) {
        _ = try run(Self.summary(sql)) { handle in PQexec(handle, sql) }
    }

    func preparedName(of statement: PostgresStatement) throws(PostgresError) -> String {
        if let name = prepared[statement] { return name }
        preparedCount += 1
        let name = "tally_\(preparedCount)"
        let types = statement.parameterTypes.map(\.oid)
        _ = try run("prepare \(statement.name)") { handle in
            types.withUnsafeBufferPointer { types in
                PQprepare(handle, name, statement.sql, Int32(types.count), types.baseAddress)
            }
        }
        prepared[statement] = name
        return name
    }

    /// Calls libpq and turns what it returns into a result or an error.
    private func run(_ operation: String, _ call: (OpaquePointer) -> OpaquePointer?) throws(PostgresError) -> PostgresResult {
        guard !isClosed else { throw .usage("the connection is closed", operation: operation) }
        guard let result = call(handle) else { throw failure(nil, operation) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return PostgresResult(handle: result, operation: operation)
        default:
            let error = failure(result, operation)
            PQclear(result)
            throw error
        }
    }

    // MARK: Transactions

    /// Runs `body` in one transaction: BEGIN, then COMMIT if `body` returns
    /// or ROLLBACK if it throws (its error is rethrown unchanged). A call
    /// inside `body` joins the outer transaction.
    ///
    /// COMMIT refuses to commit a transaction in which a statement failed,
    /// even if `body` caught that error: "the transaction is aborted, and
    /// COMMIT … is executed as ROLLBACK". Then this throws 25P02
    /// (in_failed_sql_transaction) instead of reporting success. A COMMIT
    /// whose answer is lost throws with `commitOutcomeUnknown`.
    @discardableResult
    package func transaction<R>(_ isolation: Isolation = .readCommitted, _ body: () throws -> R) throws -> R {
        if inTransactionScope { return try body() }
        try execute(script: "BEGIN ISOLATION LEVEL \(isolation.rawValue)")
        inTransactionScope = true
        defer { inTransactionScope = false }
        let result: R
        do {
            result = try body()
        } catch {
            rollbackQuietly()
            throw error
        }
        try commit()
        return result
    }

    private func commit() throws(PostgresError) {
        if PQtransactionStatus(handle) == PQTRANS_INERROR {
            rollbackQuietly()
            throw PostgresError(kind: .server, sqlState: "25P02",
                                message: "a statement in the transaction failed (its error was caught); rolled back, not committed",
                                operation: "commit")
        }
        do throws(PostgresError) {
            let result = try run("commit") { handle in PQexec(handle, "COMMIT") }
            guard result.commandStatus == "COMMIT" else {
                throw PostgresError(kind: .server, sqlState: "25P02",
                                    message: "the server rolled the transaction back (\(result.commandStatus))",
                                    operation: "commit")
            }
        } catch {
            var error = error
            if error.isConnectionLost { error.commitOutcomeUnknown = true }
            throw error
        }
    }

    /// ROLLBACK if a transaction is open and the connection is up; its own
    /// failure changes nothing for the caller, who already has an error.
    private func rollbackQuietly() {
        guard !isClosed, PQstatus(handle) == CONNECTION_OK, PQtransactionStatus(handle) != PQTRANS_IDLE else { return }
        if let result = PQexec(handle, "ROLLBACK") { PQclear(result) }
    }

    // MARK: Reconnect

    /// Connects again with the same parameters (PQreset) after a loss: the
    /// server session starts afresh, so statements are prepared again on
    /// their next use and the LISTENs are repeated here. Notifications sent
    /// while the connection was down are lost: a listener reads the change
    /// log after its last seq once this returns. Throws `.connection` if the
    /// server is still unreachable; call again later.
    package func reconnect() throws(PostgresError) {
        guard !isClosed else { throw .usage("the connection is closed", operation: "reconnect") }
        prepared.removeAll()
        notices.last = nil
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else {
            throw PostgresError(kind: .connection, message: Self.tidy(PQerrorMessage(handle)),
                                operation: "reconnect to \(url)", server: url.description)
        }
        for channel in channels.sorted() {
            try execute(script: "LISTEN \(Self.quoted(channel))")
        }
    }

    // MARK: Errors

    /// The error of a failed call: the server's fields when it sent them;
    /// `.connection` whenever libpq's status says the connection is gone.
    func failure(_ result: OpaquePointer?, _ operation: String) -> PostgresError {
        func field(_ code: Int32) -> String? {
            guard let result, let value = PQresultErrorField(result, code) else { return nil }
            return String(cString: value)
        }
        let lost = PQstatus(handle) != CONNECTION_OK
        var message = field(tally_pg_diag_message_primary())
            ?? result.map({ Self.tidy(PQresultErrorMessage($0)) }).flatMap { $0.isEmpty ? nil : $0 }
            ?? Self.tidy(PQerrorMessage(handle))
        if message.isEmpty { message = lost ? "the connection is gone" : "unknown error" }
        var detail = field(tally_pg_diag_message_detail())
        if lost, let notice = notices.last, notice.severity == "FATAL" || notice.severity == "PANIC" {
            // The server's goodbye arrived between statements, as a notice:
            // "terminating connection due to administrator command" says why.
            let said = "the server said: \(notice.message)" + (notice.sqlState.map { " (SQLSTATE \($0))" } ?? "")
            detail = detail.map { "\($0); \(said)" } ?? said
        }
        return PostgresError(kind: lost ? .connection : .server, sqlState: field(tally_pg_diag_sqlstate()),
                             message: message, detail: detail, hint: field(tally_pg_diag_message_hint()),
                             constraint: field(tally_pg_diag_constraint_name()), operation: operation,
                             server: url.description)
    }

    /// libpq's messages end in a newline and continue on tab-indented lines.
    static func tidy(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "" }
        return String(cString: text).split(whereSeparator: \.isNewline)
            .map { $0.trimmingPrefix(while: \.isWhitespace) }
            .joined(separator: " ")
    }

    /// A statement's first words, to name it in errors.
    static func summary(_ sql: String) -> String {
        let words = sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return words.count <= 60 ? words : String(words.prefix(57)) + "…"
    }

    /// An identifier in double quotes, with quotes doubled ("Lexical
    /// Structure", quoted identifiers).
    static func quoted(_ identifier: String) -> String {
        "\"" + identifier.replacing("\"", with: "\"\"") + "\""
    }

    // MARK: C plumbing

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    /// Notices and warnings go to `notices` instead of libpq's default,
    /// which prints them on standard error.
    private func installNoticeReceiver() {
        let context = Unmanaged.passUnretained(notices).toOpaque()
        PQsetNoticeReceiver(handle, { context, result in
            guard let context, let result else { return }
            func field(_ code: Int32) -> String? { PQresultErrorField(result, code).map { String(cString: $0) } }
            let log = Unmanaged<NoticeLog>.fromOpaque(context).takeUnretainedValue()
            log.last = PostgresNotice(severity: field(tally_pg_diag_severity()) ?? "NOTICE",
                                      sqlState: field(tally_pg_diag_sqlstate()),
                                      message: field(tally_pg_diag_message_primary()) ?? PostgresConnection.tidy(PQresultErrorMessage(result)))
        }, context)
    }

    /// The connection parameter key words this libpq knows (PQconndefaults).
    static let knownKeywords: Set<String> = {
        guard let options = PQconndefaults() else { return [] }
        defer { PQconninfoFree(options) }
        var keywords: Set<String> = []
        var option = options
        while let keyword = option.pointee.keyword {
            keywords.insert(String(cString: keyword))
            option += 1
        }
        return keywords
    }()
}

/// A notice or warning from the server (a NoticeResponse): RAISE NOTICE,
/// "identifier will be truncated", or the FATAL goodbye of a server that
/// shuts down while the connection is idle.
package struct PostgresNotice: Sendable, Equatable {
    /// NOTICE, WARNING, FATAL, … (PG_DIAG_SEVERITY_NONLOCALIZED).
    package var severity: String
    package var sqlState: String?
    package var message: String

    package init(severity: String, sqlState: String?, message: String) {
        self.severity = severity
        self.sqlState = sqlState
        self.message = message
    }
}

/// Where libpq's notice receiver, a C function, leaves what it receives.
/// Written only inside libpq calls, on the connection's thread.
private final class NoticeLog {
    var last: PostgresNotice?
}
