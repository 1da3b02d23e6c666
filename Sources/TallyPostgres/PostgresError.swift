/// A failure talking to PostgreSQL: what the server said (SQLSTATE, primary
/// message, detail, hint), what the caller was doing, and whether the
/// connection is gone. The future store maps `isConnectionLost` to the wire
/// code `unavailable`, `isUniqueViolation` to a conflict, and so on.
///
/// Never carries a password: the server is named by its redacted URL.
public struct PostgresError: Error, CustomStringConvertible, Sendable, Equatable {
    /// Where a failure comes from, which decides what a caller can do about it.
    public enum Kind: Sendable, Equatable {
        /// The server refused a statement; `sqlState` says why. The
        /// connection is still usable (outside a failed transaction).
        case server
        /// No connection: it could not be made, or it broke (the server
        /// restarted, the network failed). Reconnect, then catch up.
        case connection
        /// The caller's mistake, found before anything was sent or while
        /// reading a row: a bad URL, a parameter of the wrong type, a column
        /// read as a type it is not.
        case usage
    }

    public var kind: Kind
    /// The five-character SQLSTATE (PG_DIAG_SQLSTATE), when the server sent
    /// one ("23505"); nil for failures libpq or this wrapper found.
    public var sqlState: String?
    /// The primary message (PG_DIAG_MESSAGE_PRIMARY), or libpq's or our own words.
    public var message: String
    /// PG_DIAG_MESSAGE_DETAIL: for a unique violation, the key that exists.
    public var detail: String?
    /// PG_DIAG_MESSAGE_HINT.
    public var hint: String?
    /// PG_DIAG_CONSTRAINT_NAME: the constraint a violation broke.
    public var constraint: String?
    /// What the caller was doing: "connect", a statement's name, "commit", …
    public var operation: String
    /// The server, as a redacted URL (`postgres://tally@127.0.0.1:5432/db`), when known.
    public var server: String?
    /// A COMMIT was sent but its answer never came: the transaction may or
    /// may not have committed. Read the state back (by seq) before retrying.
    public var commitOutcomeUnknown: Bool

    public init(kind: Kind, sqlState: String? = nil, message: String, detail: String? = nil, hint: String? = nil,
                constraint: String? = nil, operation: String, server: String? = nil, commitOutcomeUnknown: Bool = false) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.operation = operation
        self.server = server
        self.commitOutcomeUnknown = commitOutcomeUnknown
    }

    /// The connection is unusable until `reconnect()`: it broke or could not
    /// be made (libpq's status is CONNECTION_BAD), or the server said so —
    /// class 08 "Connection Exception", or 57P01–57P03 (the server is
    /// shutting down, crashed, or is still starting; appendix A of the
    /// PostgreSQL manual, "PostgreSQL Error Codes").
    public var isConnectionLost: Bool {
        if kind == .connection { return true }
        guard let sqlState else { return false }
        return sqlState.hasPrefix("08") || sqlState == "57P01" || sqlState == "57P02" || sqlState == "57P03"
    }

    /// 23505 unique_violation: a key that already exists.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// 40001 serialization_failure: retry the whole transaction.
    public var isSerializationFailure: Bool { sqlState == "40001" }

    /// 40P01 deadlock_detected: retry the whole transaction.
    public var isDeadlock: Bool { sqlState == "40P01" }

    public var description: String {
        var text = "\(operation): \(message)"
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let detail { text += "; detail: \(detail)" }
        if let hint { text += "; hint: \(hint)" }
        switch kind {
        case .connection:
            text += commitOutcomeUnknown
                ? " [connection lost during COMMIT: the transaction may have committed]"
                : " [no connection to \(server ?? "PostgreSQL")]"
        case .server, .usage:
            break
        }
        return text
    }

    /// The caller's mistake, with what to fix.
    static func usage(_ message: String, operation: String) -> PostgresError {
        PostgresError(kind: .usage, message: message, operation: operation)
    }
}
