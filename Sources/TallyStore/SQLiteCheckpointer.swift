@preconcurrency import Glibc
import CSQLite
import TallyConcurrency
import TallySQLite

/// Copies the WAL back into the database file on its own thread and
/// connection, so that no commit ever waits for a checkpoint.
///
/// sqlite.org/wal.html: "By default, SQLite does a checkpoint automatically
/// when the WAL file reaches a threshold size of 1000 pages" — on the
/// committing connection, inside the commit call. The writer turns that off
/// (`PRAGMA wal_autocheckpoint=0`) and instead learns the WAL size from its
/// `sqlite3_wal_hook`, which "is invoked by SQLite after the commit has taken
/// place" with "the number of pages currently in the write-ahead log file";
/// past the threshold it signals this thread, which runs a PASSIVE
/// checkpoint: "Checkpoint as many frames as possible without waiting for any
/// database readers or writers to finish" (sqlite.org/c3ref/wal_checkpoint_v2.html).
/// Once a checkpoint has copied everything, the next writer starts the WAL
/// over from its beginning, so the file stops growing. On close a TRUNCATE
/// checkpoint leaves an empty WAL behind.
final class SQLiteCheckpointer: @unchecked Sendable {
    /// SQLite's own default threshold.
    static let walPagesThreshold: Int32 = 1_000

    private struct State {
        var requested = false
        var stopping = false
        var thread: pthread_t?
        /// After a failed checkpoint (a full disk cannot take the pages the
        /// database grows by), none is requested before this (monotonic
        /// nanoseconds): the WAL keeps the commits meanwhile, and trying
        /// again after every commit would only add failing I/O.
        var retryAt: UInt64 = 0
    }

    /// How long a failed checkpoint waits before the next is requested.
    static let retryAfterFailureNanos: UInt64 = 1_000_000_000

    private let state = ConditionLock(State())
    /// Used only by the checkpointer thread once it runs (by `stop` when it never ran).
    private let connection: SQLiteConnection
    private let diagnostics: LockedValueBox<StoreDiagnostics>

    init(connection: SQLiteConnection, diagnostics: LockedValueBox<StoreDiagnostics>) {
        self.connection = connection
        self.diagnostics = diagnostics
    }

    func start() throws(StoreError) {
        let thread = try StoreThread.spawn(name: "tally-store-ckpt") { [self] in run() }
        state.withLock { $0.thread = thread }
    }

    /// Called by the writer's WAL hook after each commit (writer thread).
    func walDidGrow(pages: Int32) {
        guard pages >= Self.walPagesThreshold else { return }
        let wake = state.withLock { s -> Bool in
            guard !s.requested, s.retryAt == 0 || monotonicNanos() >= s.retryAt else { return false }
            s.requested = true
            return true
        }
        if wake { state.signal() }
    }

    /// Runs a TRUNCATE checkpoint, closes the connection, ends the thread.
    /// Call after the writer connection is closed.
    func stop() {
        let thread = state.withLock { s -> pthread_t? in
            s.stopping = true
            return s.thread
        }
        state.signal()
        if let thread {
            StoreThread.join(thread)
        } else {
            finish()
        }
    }

    private func run() {
        while true {
            let (checkpoint, stop) = state.wait { s -> (Bool, Bool)? in
                guard s.requested || s.stopping else { return nil }
                defer { s.requested = false }
                return (s.requested, s.stopping)
            }
            if stop { break }
            if checkpoint { self.checkpoint(SQLITE_CHECKPOINT_PASSIVE) }
        }
        finish()
    }

    private func finish() {
        // TRUNCATE: "also truncates the log file to zero bytes just prior to a successful return".
        checkpoint(SQLITE_CHECKPOINT_TRUNCATE)
        connection.close()
    }

    private func checkpoint(_ mode: Int32) {
        var logFrames: Int32 = 0
        var checkpointed: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(connection.db, "main", mode, &logFrames, &checkpointed)
        let error = rc == SQLITE_OK ? nil : StoreError(code: rc, message: String(cString: sqlite3_errmsg(connection.db)),
                                                        operation: "wal_checkpoint(\(mode == SQLITE_CHECKPOINT_PASSIVE ? "PASSIVE" : "TRUNCATE"))")
        state.withLock { $0.retryAt = error == nil ? 0 : monotonicNanos() &+ Self.retryAfterFailureNanos }
        diagnostics.withLock { d in
            if let error {
                d.checkpointFailures += 1
                d.lastCheckpointError = error
            } else {
                d.checkpoints += 1
            }
        }
    }
}
