@preconcurrency import Glibc
import CSQLite
import TallySQLite

/// A storage failure: the SQLite result code, SQLite's message and what the
/// store was doing.
///
/// MemoryStore reports the same codes SQLite would (a change seq that is
/// already in the log is `SQLITE_CONSTRAINT_PRIMARYKEY` in both), so callers
/// can handle both backends alike.
public typealias StoreError = SQLiteError

extension StoreError {
    /// The store was closed before the unit was submitted.
    static let closed = StoreError(code: SQLITE_MISUSE, message: "the store is closed", operation: "submit")

    /// A unit queued behind a failed one (whose error is normally reported instead).
    static let discarded = StoreError(code: SQLITE_ABORT, message: "an earlier unit failed", operation: "commit")
}
