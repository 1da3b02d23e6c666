import TallySQLite

/// How hard a commit tries to reach the disk: SQLite's `PRAGMA synchronous`.
///
/// sqlite.org/pragma.html#pragma_synchronous: "A transaction committed in WAL
/// mode with synchronous=NORMAL might roll back following a power loss or
/// system crash." With FULL "the WAL file is synchronized before each
/// transaction commit", so a unit reported as committed survives a power
/// loss. That is what the hub promises its clients, hence the default. Both
/// survive a crash of the process alone (SIGKILL): the data is in the OS.
public enum Durability: String, Sendable, Equatable, CaseIterable {
    /// `synchronous=FULL`: an fsync of the WAL per commit (the default).
    case full
    /// `synchronous=NORMAL`: no fsync per commit; the last commits may be lost on power loss.
    case normal
    /// `synchronous=OFF`: no fsync at all; a power loss may corrupt the database.
    case off

    /// The value `PRAGMA synchronous` reads back (0 OFF, 1 NORMAL, 2 FULL).
    public var synchronousLevel: Int64 {
        switch self {
        case .off: 0
        case .normal: 1
        case .full: 2
        }
    }

    /// The connection setting it stands for.
    var synchronous: SQLiteConnection.Synchronous {
        switch self {
        case .off: .off
        case .normal: .normal
        case .full: .full
        }
    }
}
