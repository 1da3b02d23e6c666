import CSQLite

/// Why a store file could not be copied, inspected or restored: the cases
/// an operator can act on are told apart from a plain SQLite failure, so
/// `tally backup` and `tally restore` can say what to fix.
public enum StoreFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No file at the path.
    case missing(path: String)
    /// The file is not an SQLite database at all (SQLITE_NOTADB).
    case notADatabase(path: String)
    /// An SQLite database, but not one a Tally hub wrote: `reason` says what
    /// is missing (no schema version, no `meta` table).
    case notATallyStore(path: String, reason: String)
    /// Written by a newer build, whose schema this one cannot read.
    case newerSchema(path: String, found: Int64, supported: Int64)
    /// `PRAGMA quick_check` found damage; `report` is its first line.
    case damaged(path: String, report: String)
    /// The sequence cannot jump ahead without passing 2^53, the largest
    /// integer every client (JavaScript's numbers) reads exactly.
    case sequenceExhausted(path: String, head: Int64)
    /// Any other failure of SQLite or the file system underneath.
    case store(StoreError)

    public var description: String {
        switch self {
        case .missing(let path):
            return "\(path) does not exist"
        case .notADatabase(let path):
            return "\(path) is not an SQLite database"
        case .notATallyStore(let path, let reason):
            return "\(path) is an SQLite database but not a Tally store (\(reason))"
        case .newerSchema(let path, let found, let supported):
            return "\(path) was written by a newer Tally (schema \(found); this build reads up to \(supported)): "
                + "use that version or a newer one"
        case .damaged(let path, let report):
            return "\(path) is damaged (SQLite's quick_check: \(report))"
        case .sequenceExhausted(let path, let head):
            return "\(path) is at seq \(head): the restored sequence would pass 2^53, which clients cannot count"
        case .store(let error):
            return "\(error)"
        }
    }

    /// `.notADatabase` for SQLite's "file is not a database", else `.store`.
    init(_ error: StoreError, path: String) {
        self = error.primaryCode == SQLITE_NOTADB ? .notADatabase(path: path) : .store(error)
    }
}
