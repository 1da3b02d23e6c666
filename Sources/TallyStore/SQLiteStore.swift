@preconcurrency import Glibc
import CSQLite
import TallyConcurrency
import TallySQLite

/// The durable store: one SQLite file (`tally.sqlite3`) in WAL mode, written
/// by one writer thread with group commit. See `Store` for the design.
public final class SQLiteStore: InPlaceCommitting {
    public static let fileName = "tally.sqlite3"

    /// The database file.
    public let path: String
    public let durability: Durability
    let committer: GroupCommitter
    let diagnostics: LockedValueBox<StoreDiagnostics>

    /// Opens (creating when missing) `directory/tally.sqlite3` and brings its
    /// schema up to date. O(1) in the amount of data: nothing is scanned.
    ///
    /// - Parameters:
    ///   - directory: created with mode 0700 (and its missing parents) when missing.
    ///   - durability: `PRAGMA synchronous` on every connection; see `Durability`.
    ///   - retention: how much change log and idempotency to keep.
    ///   - clock: compared with change and idempotency times for age-based retention.
    public convenience init(directory: String, durability: Durability = .full, retention: StoreRetention = .init(),
                            clock: StoreClock = .system) throws(StoreError) {
        try self.init(directory: directory, durability: durability, retention: retention, clock: clock,
                      hooks: StoreTestHooks())
    }

    /// With test hooks in the writer (`StoreTestHooks`).
    @_spi(Testing) public init(directory: String, durability: Durability, retention: StoreRetention,
                               clock: StoreClock, hooks: StoreTestHooks) throws(StoreError) {
        try Self.createDirectory(directory)
        // SQLite creates the -wal and -shm files beside the database: a
        // directory it cannot write fails there with a bare "unable to open
        // database file". Ask first, and keep the errno that says why.
        guard access(directory, W_OK) == 0 else {
            throw StoreError.fileSystem(errno, operation: "write to \(directory)", code: SQLITE_READONLY)
        }
        path = directory.hasSuffix("/") ? directory + Self.fileName : directory + "/" + Self.fileName
        self.durability = durability
        let diagnostics = LockedValueBox(StoreDiagnostics())
        self.diagnostics = diagnostics
        let connection = try SQLiteConnection(path: path, role: .writer, synchronous: durability.synchronous)
        try SQLiteSchema.migrate(connection)
        do {
            try connection.presizeWAL()
        } catch where error.isFull {
            // Sizing the WAL only saves work later: a disk without room for
            // it still serves reads, and its writes are answered one by one.
        }
        let checkpointer = SQLiteCheckpointer(
            connection: try SQLiteConnection(path: path, role: .checkpointer, synchronous: durability.synchronous),
            diagnostics: diagnostics)
        let writer = try SQLiteWriter(connection: connection, checkpointer: checkpointer, diagnostics: diagnostics,
                                      retention: retention, clock: clock, hooks: hooks)
        committer = GroupCommitter(backend: writer, lending: hooks.lending ?? .standard)
    }

    deinit {
        committer.close()
    }

    public func makeReader() throws(StoreError) -> any StoreReading {
        try SQLiteReader(path: path, durability: durability)
    }

    public func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) {
        committer.start(onCommit: onCommit)
    }

    public func submit(_ unit: StoreUnit) {
        committer.submit(unit, wakeWriter: true)
    }

    public func submit(_ unit: StoreUnit, wakeWriter: Bool) {
        committer.submit(unit, wakeWriter: wakeWriter)
    }

    public func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError) {
        try committer.applyBeforeStart(units)
    }

    public func commitQueued() {
        committer.commitQueued()
    }

    public func resumeAfterFailure() {
        committer.resumeAfterFailure()
    }

    public var health: StoreHealth {
        diagnostics.withLock { $0.health }
    }

    public func close() {
        committer.close()
    }

    /// `mkdir -p` with mode 0700: the database holds every client's data.
    /// Public so the hub can create its data directory before it locks it.
    public static func createDirectory(_ directory: String) throws(StoreError) {
        var partial = directory.hasPrefix("/") ? "/" : ""
        for component in directory.split(separator: "/") {
            partial += component
            if mkdir(partial, 0o700) != 0 && errno != EEXIST {
                throw StoreError.fileSystem(errno, operation: "create directory \(partial)")
            }
            partial += "/"
        }
    }
}
