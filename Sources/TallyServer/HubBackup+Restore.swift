@preconcurrency import Glibc
import TallyFileLock
import TallyStore

/// `tally restore`: a backup put in place of a data directory's store.
extension HubBackup {
    /// What `restore` did.
    public struct RestoreReport: Sendable {
        /// What the backup said it holds.
        public var manifest: BackupManifest
        /// The restored store: the backup's records and lists, its sequence
        /// moved on by `SQLiteBackup.restoreSeqJump`.
        public var store: SQLiteBackup.Summary
        /// The backup's photos: how many the data directory got as links,
        /// as copies, or had already.
        public var photosLinked: Int
        public var photosCopied: Int
        public var photosPresent: Int
        /// Where the store it replaced was kept, when there was one.
        public var replaced: String?
    }

    /// Puts the backup in `source` in place as the store of `dataDirectory`
    /// (created when missing), with its photos.
    ///
    /// Refuses while a hub holds the directory, and holds the directory's
    /// lock itself until it is done, so no hub starts halfway. The backup
    /// is checked first (complete, a Tally store this build reads, not
    /// damaged), then copied beside the live store and moved to a new stretch
    /// of the sequence (`SQLiteBackup.markRestored`), the photos the
    /// directory lacks are added, and only then does the copy replace the
    /// store, by rename(2): a crash at any point leaves the old store or the
    /// new one, never a mix. A replaced store (`force`) first has its WAL
    /// folded in — a WAL left beside the new file would be applied to it —
    /// and is kept as `tally.sqlite3.replaced`.
    public static func restore(from source: String, into dataDirectory: String, force: Bool,
                               clock: StoreClock = .system) throws(BackupError) -> RestoreReport {
        let source = trimmed(source)
        let directory = trimmed(dataDirectory)
        let (manifest, backupStore) = try checkBackup(source)

        do {
            try SQLiteStore.createDirectory(directory)
        } catch {
            throw .fileSystem(operation: "create the data directory", path: directory, errno: error.systemErrno)
        }
        let lockPath = directory + "/" + DataDirectory.lockFileName
        let lock: FileLock?
        do {
            lock = try FileLock.acquire(lockPath)
        } catch {
            throw .fileSystem(operation: "lock", path: lockPath, errno: error.errno)
        }
        guard let lock else { throw .hubRunning(directory: directory, pid: FileLock.recordedHolder(of: lockPath)) }
        defer { lock.release() }

        let live = directory + "/" + SQLiteStore.fileName
        let hasStore = access(live, F_OK) == 0
        let hasJournals = ["-wal", "-journal"].contains { access(live + $0, F_OK) == 0 }
        if (hasStore || hasJournals) && !force {
            throw .storeExists(directory: directory, hasStore ? try? SQLiteBackup.inspect(live, checkIntegrity: false) : nil)
        }

        let restoring = directory + "/" + restoringStoreName
        removeDatabaseFiles(restoring)
        let restored: SQLiteBackup.Summary
        do {
            _ = try SQLiteBackup.copy(from: backupStore, to: restoring)
            restored = try SQLiteBackup.markRestored(restoring, now: clock.now())
        } catch {
            removeDatabaseFiles(restoring)
            throw .store(directory: directory, error)
        }
        let photos: BlobFiles.CopyCount
        do throws(BackupError) {
            photos = try copyPhotos(from: source, into: directory)
        } catch {
            removeDatabaseFiles(restoring)
            throw error
        }

        var replaced: String?
        do throws(BackupError) {
            if hasStore {
                do { try SQLiteBackup.foldWAL(live) } catch { throw BackupError.store(directory: directory, error) }
                let kept = directory + "/" + replacedStoreName
                unlink(kept)
                // A link keeps the old file under a second name while the
                // rename below takes the first: no moment without a store.
                if link(live, kept) == 0 { replaced = kept }
            }
            // No WAL or journal of the old store may stay beside the new file:
            // SQLite would apply it to whatever file has the name.
            for suffix in ["-wal", "-shm", "-journal"] where access(live + suffix, F_OK) == 0 {
                guard unlink(live + suffix) == 0 else {
                    throw .fileSystem(operation: "remove", path: live + suffix, errno: errno)
                }
            }
            guard rename(restoring, live) == 0 else {
                throw .fileSystem(operation: "rename \(restoring) to", path: live, errno: errno)
            }
            try syncDirectory(directory)
        } catch {
            removeDatabaseFiles(restoring)
            throw error
        }
        return RestoreReport(manifest: manifest, store: restored, photosLinked: photos.linked,
                             photosCopied: photos.copied, photosPresent: photos.present, replaced: replaced)
    }

    /// Checks that `source` is a complete backup whose store this build can
    /// restore; its manifest and the path of its store.
    static func checkBackup(_ source: String) throws(BackupError) -> (BackupManifest, String) {
        guard isDirectory(source) else { throw .sourceMissing(source: source) }
        let manifest = try BackupManifest.read(from: source)
        let store = source + "/" + SQLiteStore.fileName
        guard access(store, F_OK) == 0 else {
            throw .notABackup(source: source, reason: "it has no \(SQLiteStore.fileName)")
        }
        let summary: SQLiteBackup.Summary
        do {
            summary = try SQLiteBackup.inspect(store, checkIntegrity: true)
        } catch {
            switch error {
            case .notADatabase, .notATallyStore: throw .notABackup(source: source, reason: "\(error)")
            case .missing, .newerSchema, .damaged, .sequenceExhausted, .store: throw .backupUnusable(source: source, error)
            }
        }
        guard summary.headSeq == manifest.headSeq else {
            throw .notABackup(source: source, reason: "its store is at seq \(summary.headSeq) but \(BackupManifest.fileName) "
                + "says \(manifest.headSeq): the files come from different backups")
        }
        return (manifest, store)
    }

    /// Removes a database file and the journals SQLite may have left beside it.
    static func removeDatabaseFiles(_ path: String) {
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(path + suffix) }
    }
}
