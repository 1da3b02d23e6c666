@preconcurrency import Glibc
import CSQLite

/// A failure of an SQLite call: the result code, SQLite's message and what
/// the caller was doing. TallyStore reports it as `StoreError`.
public struct SQLiteError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The SQLite result code, extended where SQLite gave one
    /// (sqlite.org/rescode.html).
    public var code: Int32
    /// SQLite's message (`sqlite3_errmsg`) or the caller's own words.
    public var message: String
    /// What the caller was doing: "open", "insert change", "migrate to 1", …
    public var operation: String
    /// The errno of the system call that failed underneath, when one did
    /// (`sqlite3_system_errno`): EACCES, EROFS, ENOSPC say what to fix
    /// where SQLite's code says only "unable to open" or "I/O error". 0
    /// when unknown.
    public var systemErrno: Int32

    public init(code: Int32, message: String, operation: String, systemErrno: Int32 = 0) {
        self.code = code
        self.message = message
        self.operation = operation
        self.systemErrno = systemErrno
    }

    /// The primary result code (the low 8 bits of an extended one).
    public var primaryCode: Int32 { code & 0xff }

    /// The database was locked by another connection for longer than the busy timeout.
    public var isBusy: Bool { primaryCode == SQLITE_BUSY }

    /// A uniqueness or other constraint failed (for example a change seq used twice).
    public var isConstraintViolation: Bool { primaryCode == SQLITE_CONSTRAINT }

    /// The disk (or the file system's quota) is full.
    public var isFull: Bool {
        primaryCode == SQLITE_FULL || systemErrno == ENOSPC || systemErrno == EDQUOT
    }

    /// A file-system call on `path` failed with `errno`: the error names it
    /// in words (strerror) and keeps the number for callers that advise.
    package static func fileSystem(_ errno: Int32, operation: String, code: Int32 = SQLITE_CANTOPEN) -> SQLiteError {
        SQLiteError(code: code, message: String(cString: strerror(errno)), operation: operation, systemErrno: errno)
    }

    /// SQLite's generic words for the code ("database or disk is full"),
    /// fit for a client: unlike `message`, never a path.
    public var summary: String {
        sqlite3_errstr(code).map { String(cString: $0) } ?? "storage error \(code)"
    }

    public var description: String {
        // A store's server that could not be reached (PostgreSQL, marked
        // ENOTCONN): the message says it all, SQLite's I/O code would mislead.
        if systemErrno == ENOTCONN { return "\(operation): \(message)" }
        let meaning = sqlite3_errstr(code).map { String(cString: $0) } ?? "unknown"
        let system = systemErrno == 0 ? "" : ", errno \(systemErrno)"
        return "\(operation): \(message) (SQLite code \(code): \(meaning)\(system))"
    }

    /// SQLITE_CONSTRAINT_PRIMARYKEY, a macro that does not import:
    /// `SQLITE_CONSTRAINT | (6<<8)` (sqlite.org/rescode.html#constraint_primarykey).
    public static let constraintPrimaryKey: Int32 = SQLITE_CONSTRAINT | (6 << 8)
}
