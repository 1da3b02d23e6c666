@preconcurrency import Glibc
import TallyFileLock
import TallyStore

/// Why `tally backup` or `tally restore` did not do its work. Each message
/// names what is wrong and what to do; `isUsage` tells the mistakes in the
/// command line (exit status 2) from failures of the work (1).
public enum BackupError: Error, Sendable, CustomStringConvertible {
    // MARK: The command names something it cannot use (exit 2)

    /// `--data` names a directory without a store.
    case noStore(directory: String)
    /// DEST's parent directory does not exist.
    case destinationParentMissing(destination: String, parent: String)
    /// DEST exists and is not an empty directory.
    case destinationNotEmpty(destination: String)
    /// DEST exists and is a file.
    case destinationNotADirectory(destination: String)
    /// SRC does not exist or is not a directory.
    case sourceMissing(source: String)
    /// SRC is not something `tally backup` made (or it was interrupted).
    case notABackup(source: String, reason: String)

    // MARK: The work failed, or the state forbids it now (exit 1)

    /// A hub holds the data directory's lock (`pid` when it wrote one).
    case hubRunning(directory: String, pid: Int32?)
    /// `restore` without `--force` into a directory that holds a store.
    case storeExists(directory: String, SQLiteBackup.Summary?)
    /// The store in the data directory cannot be read, copied or set aside.
    case store(directory: String, StoreFileError)
    /// The backup's store is damaged, newer than this build, or unreadable.
    case backupUnusable(source: String, StoreFileError)
    /// A photo's bytes do not hash to its name.
    case photoDamaged(path: String, actual: String)
    /// The file system refused (`errno`) while doing `operation`.
    case fileSystem(operation: String, path: String, errno: Int32)

    /// Whether the command line is at fault (exit status 2).
    public var isUsage: Bool {
        switch self {
        case .noStore, .destinationParentMissing, .destinationNotEmpty, .destinationNotADirectory, .sourceMissing,
             .notABackup:
            true
        case .hubRunning, .storeExists, .store, .backupUnusable, .photoDamaged, .fileSystem:
            false
        }
    }

    public var description: String {
        switch self {
        case .noStore(let directory):
            return "there is no Tally store in \(directory) (no \(SQLiteStore.fileName)): give the hub's data directory with --data DIR"
        case .destinationParentMissing(let destination, let parent):
            return "cannot create \(destination): its parent directory \(parent) does not exist; create it first or choose another DEST"
        case .destinationNotEmpty(let destination):
            return "\(destination) already exists and is not empty: a backup goes into a new or empty directory "
                + "(use a new name per backup, e.g. with the date)"
        case .destinationNotADirectory(let destination):
            return "\(destination) exists and is not a directory: give a new directory for the backup"
        case .sourceMissing(let source):
            return "\(source) is not a directory: give the directory 'tally backup' made"
        case .notABackup(let source, let reason):
            return "\(source) is not a Tally backup: \(reason)"
        case .hubRunning(let directory, let pid):
            return "a hub\(pid.map { " (pid \($0))" } ?? "") is using \(directory): stop it first "
                + "(restore replaces the store it has open), then run restore again"
        case .storeExists(let directory, let summary):
            let what = summary.map { " (seq \($0.headSeq), \($0.recordCount) records)" } ?? ""
            return "\(directory) already holds a store\(what): restoring replaces it; add --force to do so "
                + "(the old store is kept as \(directory)/\(HubBackup.replacedStoreName))"
        case .store(let directory, let error):
            return "the store in \(directory) cannot be used: \(error)"
        case .backupUnusable(let source, let error):
            return "the backup in \(source) cannot be restored: \(error)"
        case .photoDamaged(let path, let actual):
            return "the photo \(path) is damaged (its bytes hash to \(actual), not to its name); "
                + "restore from another backup, or remove that file to restore without it"
        case .fileSystem(let operation, let path, let errno):
            let advice = [ENOSPC, EDQUOT].contains(errno) ? ": free some space, then try again"
                : [EACCES, EPERM, EROFS].contains(errno) ? ": give this user write access there, or choose another directory" : ""
            return "cannot \(operation)\(path.isEmpty ? "" : " " + path): \(String(cString: strerror(errno)))\(advice)"
        }
    }

    /// A blob store failure while copying photos: only the file system
    /// fails there (the other cases are an upload's).
    init(_ error: BlobError) {
        if case .storageFailed(let operation, let path, let errno) = error {
            self = .fileSystem(operation: operation, path: path, errno: errno)
        } else {
            self = .fileSystem(operation: "copy the photos (\(error.code))", path: "", errno: EIO)
        }
    }
}
