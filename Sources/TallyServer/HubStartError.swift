@preconcurrency import Glibc
import TallyNet
import TallyStore

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
