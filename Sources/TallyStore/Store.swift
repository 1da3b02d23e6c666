// TallyStore: durable storage for the hub. It knows nothing of sockets and
// parses no JSON: record data and change messages arrive as UTF-8 bytes and
// leave as the same bytes.
//
// # Shape
//
// `Store` is the write side, `StoreReading` the read side; each has three real
// implementations, `SQLiteStore`, `MemoryStore` and `PostgresStore` (the same
// group commit on a PostgreSQL server; see ARCHITECTURE.md "PostgreSQL
// store"), and the tests run one body against all. A write is a `StoreUnit`: the mutations, change-log entries and
// idempotency answer of one client command, applied all or nothing.
//
// # Threads
//
// - Callers `submit` from any thread. A unit goes into a queue guarded by a
//   pthread mutex + condition (`GroupCommitter`); submit never does I/O.
// - One writer thread owns the write connection, and only one thread writes
//   at a time, so there is never write-lock contention inside the process.
// - Commit in place is a capability of these two stores, not part of
//   `Store` (`InPlaceCommitting`): while the writer is parked and the store
//   idle (`LendingRule`: no commit for 2 ms, the last one quick), a
//   submitter that would otherwise wait for the commit (an event loop at its
//   iteration's end) borrows the connection and commits on its own thread
//   (`commitQueued`): a lone write then wakes no thread before its commit or
//   after it. The writer stays parked meanwhile and takes over what queued
//   up behind. A backend without a writer thread to lend (a server
//   database) implements `Store` alone, and the hub then leaves every
//   commit to it.
// - One checkpointer thread owns a second connection and does nothing but
//   WAL checkpoints (`SQLiteCheckpointer`).
// - Each reader (`makeReader()`) has its own connection and one owner thread.
//   Every connection is opened with SQLITE_OPEN_NOMUTEX: "the multi-thread
//   mode … is safe … as long as no single database connection is used
//   simultaneously in two or more threads" (sqlite.org/threadsafe.html).
//
// # Group commit
//
// The writer waits until the queue is non-empty, takes everything queued,
// and commits it in one `BEGIN IMMEDIATE … COMMIT` transaction, then calls
// `onCommit` once with every token in submission order. With
// `synchronous=FULL` a commit costs one fsync of the WAL (about 0.25 ms
// here), so while one commit syncs the next batch accumulates by itself:
// batches grow with the load and no timer or batch size needs tuning. Per
// unit the writer only binds and steps statements prepared once.
// A unit that fails (a full disk, an I/O error, a constraint) rolls the
// transaction back; the units before it are committed again alone and it
// is reported. Every unit queued behind it is reported `discarded`, not
// tried, until the submitter calls `resumeAfterFailure`: those units were
// built on the failed one's state. A unit is never split. SQLITE_BUSY
// (another process holding the write lock past the busy timeout) retries
// the whole batch.
//
// # WAL and checkpoints
//
// `PRAGMA journal_mode=WAL`: "WAL provides more concurrency as readers do not
// block writers and a writer does not block readers" (sqlite.org/wal.html).
// SQLite normally checkpoints inside a commit once the WAL passes 1000 pages;
// the writer turns that off (`PRAGMA wal_autocheckpoint=0`), watches the WAL
// size through `sqlite3_wal_hook`, and signals the checkpointer, which runs a
// PASSIVE checkpoint ("without waiting for any database readers or writers to
// finish") on its own connection. Close ends with a TRUNCATE checkpoint.
// Open writes zeros past the end of the WAL until it holds the checkpoint
// threshold and a quarter (`presizeWAL`): a commit that grows the file makes
// the file system allocate blocks inside its fdatasync, which costs device
// requests (discards, on this machine) and CPU that a commit landing inside
// the file does not pay.
//
// # Durability
//
// `Durability.full` (`PRAGMA synchronous=FULL`) is the default because a unit
// reported committed must survive a power loss: in WAL mode "a transaction
// committed … with synchronous=NORMAL might roll back following a power loss
// or system crash", while FULL syncs the WAL before each commit returns
// (sqlite.org/pragma.html#pragma_synchronous). A killed process (SIGKILL)
// loses nothing in any mode: the WAL frames are in the OS page cache, and the
// next open "recovers" them (sqlite.org/wal.html#recovery).
//
// # Retention
//
// After commits, the writer prunes in its own small transactions (at most
// 10,000 rows each, only when there is something to prune, age checked at
// most once per second of the injected clock): change-log rows beyond
// `maxChanges`, beyond `maxBytes` of pushes, or older than `maxAge`, always
// from the oldest seq, advancing `floor_seq` in the same transaction;
// idempotency rows older than `idempotencyMaxAge`. Every change with seq >
// floorSeq is retained. A step that fails (a full disk) is counted and
// tried again a second later, not after every commit.
//
// # Startup
//
// Opening is O(1) in the data: migrations are versioned by
// `PRAGMA user_version`, and head_seq, floor_seq, change_count and
// change_bytes live in the `meta` table, written in every commit
// transaction, read once at open.

/// The write side of a store: units go in, outcomes come back on a thread
/// of the store's.
///
/// This is all a backend implements. Lending the writer's connection to a
/// submitter (commit in place) is an optional capability on top,
/// `InPlaceCommitting`, that the hub uses only where a store offers it.
public protocol Store: AnyObject, Sendable {
    /// A new reader with its own connection, for one thread.
    func makeReader() throws(StoreError) -> any StoreReading
    /// Starts the writer. `onCommit` runs after every transaction (success
    /// or failure), in submission order, on the thread that committed: the
    /// store's writer, or an `InPlaceCommitting.commitQueued` caller. Later
    /// calls do nothing. Units submitted before `start` wait for it.
    func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void)
    /// Queues a unit; thread-safe, never blocks on I/O. Units commit in
    /// submission order. After `close` the unit is reported as failed at once,
    /// on the caller's thread.
    func submit(_ unit: StoreUnit)
    /// After a failed unit, every unit submitted before this call is
    /// reported `discarded` without being tried; units submitted after it
    /// are tried again. The submitter calls it once it has dropped what it
    /// built on the failed unit. Thread-safe; does nothing when nothing failed.
    func resumeAfterFailure()
    /// Applies `units` in one transaction on the calling thread, before
    /// `start` (building an index at open); throws when the store has
    /// started or the transaction fails.
    func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError)
    /// Failures of the background work (checkpoints, retention steps) so
    /// far; thread-safe.
    var health: StoreHealth { get }
    /// Commits what is queued, stops the writer and checkpointer threads,
    /// closes connections. Idempotent. From inside `onCommit` it only asks the
    /// writer to stop after the current batch.
    func close()
}

/// A store whose idle writer lends its connection to a submitter, so that
/// a lone write commits on the submitter's thread and wakes no other
/// (commit in place; see the file's comment and `GroupCommitter`).
///
/// Optional: the hub asks `store as? any InPlaceCommitting` once, and a
/// store that is not one gets every unit through `Store.submit`.
public protocol InPlaceCommitting: Store {
    /// Queues a unit as `Store.submit` does; with `wakeWriter: false` the
    /// writer is not woken: the caller must call `commitQueued()` next.
    func submit(_ unit: StoreUnit, wakeWriter: Bool)
    /// Commits the queue on the calling thread if the writer is idle (then
    /// `onCommit` runs on this thread before it returns), else leaves it to
    /// the writer. May block for the commit's I/O.
    func commitQueued()
}
