@preconcurrency import Glibc
import TallyFileLock
import TallyNet
import TallyStore

/// The hub's data directory (`--data`): created when missing, then locked
/// for one hub at a time.
///
/// Two hubs on one directory each take their own seqs from the same head:
/// until the lock, a second `tally serve` started, and the first write that
/// met the other's killed one of them (`UNIQUE constraint failed:
/// changes.seq`). Now the second refuses to start and names the first's PID.
/// The lock is a `FileLock` on `tally.lock` in the directory, released
/// however the hub ends, so a killed hub never leaves it taken.
enum DataDirectory {
    static let lockFileName = "tally.lock"

    /// Creates `directory` (mode 0700) when missing and locks it.
    ///
    /// - Throws: `.dataDirectoryInUse` when another hub holds it,
    ///   `.dataDirectory` when the file system refuses (read-only,
    ///   permission denied).
    static func lock(_ directory: String) throws(HubStartError) -> FileLock {
        do {
            try SQLiteStore.createDirectory(directory)
        } catch {
            throw HubStartError(opening: error, in: directory)
        }
        let path = directory.hasSuffix("/") ? directory + lockFileName : directory + "/" + lockFileName
        let lock: FileLock?
        do {
            lock = try FileLock.acquire(path)
        } catch {
            throw .dataDirectory(directory, errno: error.errno, doing: "open \(lockFileName)")
        }
        guard let lock else { throw .dataDirectoryInUse(directory, pid: holder(of: path)) }
        return lock
    }

    /// The PID the holder wrote; it writes it right after taking the lock,
    /// so a hub that lost the race by a moment waits a little for it.
    private static func holder(of path: String) -> Int32? {
        for _ in 0..<20 {
            if let pid = FileLock.recordedHolder(of: path) { return pid }
            usleep(5_000)
        }
        return nil
    }
}

/// Why a hub did not start.
public enum HubStartError: Error, CustomStringConvertible {
    case store(StoreError)
    case blobs(BlobError)
    case bind(SystemError)
    /// Another process (hub `pid`, when it wrote one) holds the data
    /// directory's lock.
    case dataDirectoryInUse(String, pid: Int32?)
    /// The file system refused the data directory with `errno` (EROFS,
    /// EACCES, ENOSPC, …) while the hub tried `doing`.
    case dataDirectory(String, errno: Int32, doing: String)

    /// `.dataDirectory` when the store's failure came from a file-system
    /// error whose cause the operator can fix (read-only, permission,
    /// full), else `.store`.
    init(opening error: StoreError, in directory: String) {
        self = Self.isAboutTheDirectory(error.systemErrno)
            ? .dataDirectory(directory, errno: error.systemErrno, doing: error.operation) : .store(error)
    }

    init(opening error: BlobError, in directory: String) {
        if case .storageFailed(let operation, _, let errno) = error, Self.isAboutTheDirectory(errno) {
            self = .dataDirectory(directory, errno: errno, doing: operation)
        } else {
            self = .blobs(error)
        }
    }

    private static func isAboutTheDirectory(_ errno: Int32) -> Bool {
        [EROFS, EACCES, EPERM, ENOSPC, EDQUOT].contains(errno)
    }

    /// Whether the description is a whole sentence about the data
    /// directory (printed as it is) rather than a failure inside a part.
    public var isAboutTheDataDirectory: Bool {
        switch self {
        case .dataDirectoryInUse, .dataDirectory: true
        case .store, .blobs, .bind: false
        }
    }

    public var description: String {
        switch self {
        case .store(let error): return "cannot open the store: \(error)"
        case .blobs(let error): return "cannot open the blob store: \(error)"
        case .bind(let error): return "\(error)"
        case .dataDirectoryInUse(let directory, let pid?):
            return "the data directory \(directory) is in use by another hub (pid \(pid)); stop it or use another --data"
        case .dataDirectoryInUse(let directory, nil):
            return "the data directory \(directory) is in use by another hub; stop it or use another --data"
        case .dataDirectory(let directory, let errno, let doing):
            let cause = "\(doing): \(String(cString: strerror(errno)))"
            switch errno {
            case EROFS:
                return "the data directory \(directory) is on a read-only file system (\(cause)); "
                    + "remount it read-write, or use a --data directory on a writable disk"
            case EACCES, EPERM:
                return "the data directory \(directory) (or a file in it) is not writable by this user (uid \(getuid()); \(cause)); "
                    + "give the user write access to it (chown or chmod), or use another --data"
            case ENOSPC, EDQUOT:
                return "the disk holding the data directory \(directory) is full (\(cause)); free some space, then start again"
            default:
                return "the data directory \(directory) cannot be used (\(cause))"
            }
        }
    }
}
