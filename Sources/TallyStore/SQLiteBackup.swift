@preconcurrency import Glibc
import CSQLite
import TallySQLite

/// Copies a hub's SQLite store into a new file while the hub keeps writing,
/// and reads what a store file holds (`tally backup`, `tally restore`).
///
/// The copy is SQLite's online backup API in one step: "If N is negative,
/// all remaining source pages are copied" (sqlite.org/c3ref/backup_finish.html),
/// inside one read transaction on the source, so the copy is the store as
/// of one commit. The store is in WAL mode, where "readers do not block
/// writers and a writer does not block readers" (sqlite.org/wal.html): the
/// hub's writer goes on committing while the pages are read, and its
/// PASSIVE checkpoints skip what the copy still reads. (Copying a few pages
/// per step would let the hub's commits restart the copy each time: "If the
/// source database is modified … by any connection other than the one used
/// by the backup … the backup will be restarted by the next call to
/// sqlite3_backup_step()"; a busy hub would keep it from ever ending.) The
/// backup API copies pages rather than rebuilding the file as `VACUUM INTO`
/// does: "the backup API uses fewer CPU cycles" (sqlite.org/lang_vacuum.html),
/// which matters on the hub's own machine, and its destination commits with
/// `synchronous=FULL` like any transaction, where VACUUM INTO leaves the
/// syncing to the caller.
///
/// The copy is left in rollback-journal mode: one self-contained file that
/// can be read from read-only media (a WAL database needs its `-shm` file,
/// sqlite.org/wal.html#readonly). A hub that opens it puts it back in WAL
/// mode. Every copy is checked with `PRAGMA quick_check` before it is
/// reported: pages are copied as they are, so a damaged source page would
/// otherwise travel into the backup unseen.
public enum SQLiteBackup {
    /// What a store file holds, read in one transaction.
    public struct Summary: Sendable, Equatable {
        /// `PRAGMA user_version`: which of `SQLiteSchema`'s migrations it has.
        public var schemaVersion: Int64
        public var headSeq: Int64
        public var floorSeq: Int64
        public var recordCount: Int
        public var listCount: Int
        /// The database's size (page count × page size).
        public var bytes: Int64
        /// The head of the backup this store was restored from (meta
        /// `restored_head`), nil for a store never restored.
        public var restoredHead: Int64?
    }

    /// Copies the store at `source` into the new file `destination` (mode
    /// 0600, which must not exist) and checks the copy.
    ///
    /// Safe while a hub writes to `source`: it holds one read transaction for
    /// the copy and takes no lock the hub's writer waits for.
    /// - Returns: what the copy holds.
    public static func copy(from source: String, to destination: String) throws(StoreFileError) -> Summary {
        guard access(source, F_OK) == 0 else { throw .missing(path: source) }
        // Created here, not by SQLite, for its mode: the store holds every client's data.
        let fd = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .store(.fileSystem(errno, operation: "create \(destination)")) }
        close(fd)
        do throws(StoreFileError) {
            try copyPages(from: source, to: destination)
            let summary = try inspect(destination, checkIntegrity: true)
            try syncDirectory(containing: destination)
            return summary
        } catch {
            removeDatabase(destination)
            throw error
        }
    }

    /// Opens `path` read-only and says what it holds; refuses a file that
    /// is not a Tally store this build can open.
    ///
    /// - Parameter checkIntegrity: also run `PRAGMA quick_check` (O(n): it
    ///   reads every page) and refuse a damaged file.
    public static func inspect(_ path: String, checkIntegrity: Bool) throws(StoreFileError) -> Summary {
        guard access(path, F_OK) == 0 else { throw .missing(path: path) }
        let connection: SQLiteConnection
        do {
            connection = try SQLiteConnection(path: path, role: .reader, synchronous: .full)
        } catch {
            throw StoreFileError(error, path: path)
        }
        defer { connection.close() }
        let summary = try read(connection, path: path)
        if checkIntegrity {
            // "PRAGMA quick_check … returns a single row with the value 'ok'" when
            // nothing is wrong, else one row per problem (sqlite.org/pragma.html#pragma_quick_check).
            let report: String
            do { report = try connection.queryText("PRAGMA quick_check") } catch { throw StoreFileError(error, path: path) }
            guard report == "ok" else { throw .damaged(path: path, report: report) }
        }
        return summary
    }

    /// Reads the summary in one read transaction, refusing what is not a
    /// Tally store.
    static func read(_ connection: SQLiteConnection, path: String) throws(StoreFileError) -> Summary {
        let version: Int64
        let tables: Int64
        var meta: [String: Int64] = [:]
        var records: Int64 = 0
        var lists: Int64 = 0
        let bytes: Int64
        do throws(StoreError) {
            try connection.execute("BEGIN")
            defer { if connection.inTransaction { try? connection.execute("COMMIT") } }
            version = try connection.queryInt("PRAGMA user_version")
            tables = try connection.queryInt("""
                SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'records', 'lists', 'changes')
                """)
            if version > 0, version <= SQLiteSchema.latestVersion, tables == 4 {
                let rows = try connection.prepare("SELECT key, value FROM meta", name: "read meta")
                while try rows.step() { meta[rows.text(0)] = rows.int64(1) }
                rows.reset()
                records = try connection.queryInt("SELECT count(*) FROM records")
                lists = try connection.queryInt("SELECT count(*) FROM lists")
            }
            bytes = try connection.queryInt("PRAGMA page_count") * connection.queryInt("PRAGMA page_size")
        } catch {
            throw StoreFileError(error, path: path)
        }
        guard version > 0 else { throw .notATallyStore(path: path, reason: "it has no Tally schema version") }
        guard version <= SQLiteSchema.latestVersion else {
            throw .newerSchema(path: path, found: version, supported: SQLiteSchema.latestVersion)
        }
        guard tables == 4 else {
            throw .notATallyStore(path: path, reason: "it lacks the records, lists, changes and meta tables")
        }
        guard let head = meta["head_seq"], let floor = meta["floor_seq"] else {
            throw .notATallyStore(path: path, reason: "its meta table has no head_seq or floor_seq")
        }
        return Summary(schemaVersion: version, headSeq: head, floorSeq: floor, recordCount: Int(records),
                       listCount: Int(lists), bytes: bytes, restoredHead: meta[restoredHeadKey])
    }

    /// How many times a step that found the source busy is tried again, and
    /// how long it waits between tries: WAL readers meet a lock only while
    /// another connection recovers the WAL, which takes milliseconds.
    static let busyAttempts = 100
    static let busyPauseMicros: useconds_t = 50_000

    private static func copyPages(from source: String, to destination: String) throws(StoreFileError) {
        let from: SQLiteConnection
        let to: SQLiteConnection
        do {
            from = try SQLiteConnection(path: source, role: .reader, synchronous: .full)
            // The checkpointer's role opens an existing file without putting it
            // in WAL mode: the copy takes the source's page size only outside
            // WAL mode ("If the destination is in WAL mode and the page sizes
            // differ, sqlite3_backup_step() fails with SQLITE_READONLY").
            to = try SQLiteConnection(path: destination, role: .checkpointer, synchronous: .full)
        } catch {
            throw StoreFileError(error, path: source)
        }
        defer {
            to.close()
            from.close()
        }
        guard let backup = sqlite3_backup_init(to.db, "main", from.db, "main") else {
            throw .store(StoreError(code: sqlite3_errcode(to.db), message: String(cString: sqlite3_errmsg(to.db)),
                                    operation: "start copying \(source)"))
        }
        var rc = sqlite3_backup_step(backup, -1)
        var attempts = 1
        while rc == SQLITE_BUSY || rc == SQLITE_LOCKED, attempts < busyAttempts {
            usleep(busyPauseMicros)
            rc = sqlite3_backup_step(backup, -1)
            attempts += 1
        }
        // "sqlite3_backup_finish() returns SQLITE_OK if no sqlite3_backup_step()
        // errors occurred, regardless or not of whether the backup completed",
        // else the step's error: the step's own code says whether it ended.
        let finished = sqlite3_backup_finish(backup)
        guard rc == SQLITE_DONE else {
            let code = rc == SQLITE_OK ? SQLITE_ERROR : rc
            throw StoreFileError(StoreError(code: code, message: String(cString: sqlite3_errstr(code)),
                                            operation: "copy \(source)", systemErrno: sqlite3_system_errno(from.db)),
                                 path: source)
        }
        guard finished == SQLITE_OK else {
            throw .store(StoreError(code: finished, message: String(cString: sqlite3_errmsg(to.db)),
                                    operation: "finish copying \(source)", systemErrno: sqlite3_system_errno(to.db)))
        }
        do throws(StoreError) {
            // The pages carry the source's WAL flag; this folds the copy back
            // into one rollback-journal file (and removes the -wal and -shm
            // that reading it in WAL mode made).
            let mode = try to.queryText("PRAGMA journal_mode=DELETE")
            guard mode.lowercased() == "delete" else {
                throw StoreError(code: SQLITE_ERROR, message: "journal_mode is \(mode), not delete",
                                 operation: "leave WAL mode in \(destination)")
            }
        } catch {
            throw .store(error)
        }
    }

    /// The meta key that records which head a restored store came from.
    static let restoredHeadKey = "restored_head"

    /// Removes a database file and the journals SQLite may have left beside it.
    static func removeDatabase(_ path: String) {
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(path + suffix) }
    }

    /// fsync(2) on the directory holding `path`, so a file created or
    /// renamed there survives a crash too.
    static func syncDirectory(containing path: String) throws(StoreFileError) {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .store(.fileSystem(errno, operation: "open \(directory)")) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .store(.fileSystem(errno, operation: "fsync \(directory)", code: SQLITE_IOERR)) }
    }
}
