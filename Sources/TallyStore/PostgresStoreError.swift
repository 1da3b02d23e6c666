@preconcurrency import Glibc
import CSQLite
import TallyPostgres

/// How PostgreSQL failures become `StoreError`s: the store's callers know
/// SQLite's result codes (a change seq used twice is
/// `SQLITE_CONSTRAINT_PRIMARYKEY` in every backend), so each SQLSTATE the
/// store can meet maps to the code with the same meaning
/// (sqlite.org/rescode.html; appendix A of the PostgreSQL manual,
/// "PostgreSQL Error Codes").
extension StoreError {
    /// SQLITE_BUSY_SNAPSHOT ("the snapshot is older than the database":
    /// another connection wrote first), for a PostgreSQL store whose head
    /// row moved under a group commit (`isHeadMoved`).
    static let headMovedCode: Int32 = SQLITE_BUSY | (2 << 8)

    /// Another writer committed changes to the same PostgreSQL database
    /// since this store last moved the head: the group was rolled back, and
    /// its seqs are stale. Not a busy database to retry: the hub must catch
    /// up on the other writer's changes first (several hubs, a later step).
    public var isHeadMoved: Bool { code == Self.headMovedCode }

    static func headMoved(found: Int64, expected: Int64) -> StoreError {
        StoreError(code: headMovedCode, message: "the store moved on: head is \(found), expected \(expected)",
                   operation: "move head")
    }

    /// The store's server could not be reached (a PostgreSQL connection
    /// that failed or broke): nothing about the data is wrong, and the same
    /// request may succeed once the server is back. Marked by ENOTCONN
    /// under SQLite's I/O error code, the errno of "not connected".
    public var isUnreachable: Bool { primaryCode == SQLITE_IOERR && systemErrno == ENOTCONN }

    /// A PostgreSQL failure with the SQLite code of the same meaning; the
    /// message keeps the SQLSTATE and the server's detail.
    init(_ error: PostgresError) {
        let code: Int32
        switch error.kind {
        case .connection:
            code = SQLITE_IOERR
        case .usage:
            code = SQLITE_MISUSE
        case .server:
            switch error.sqlState ?? "" {
            case "23505": code = StoreError.constraintPrimaryKey
            case let state where state.hasPrefix("23"): code = SQLITE_CONSTRAINT
            case "53100": code = SQLITE_FULL  // disk_full
            case "40001", "40P01", "55P03": code = SQLITE_BUSY  // serialization, deadlock, lock_not_available
            case "57014": code = SQLITE_INTERRUPT  // query_canceled
            case let state where state.hasPrefix("08") || state.hasPrefix("57P"): code = SQLITE_IOERR
            default: code = SQLITE_ERROR
            }
        }
        var message = error.message
        if let state = error.sqlState { message += " (SQLSTATE \(state))" }
        if let detail = error.detail { message += ": \(detail)" }
        if error.commitOutcomeUnknown { message += "; the commit's outcome is unknown" }
        self.init(code: code, message: message, operation: error.operation,
                  systemErrno: error.isConnectionLost ? ENOTCONN : 0)
    }
}
