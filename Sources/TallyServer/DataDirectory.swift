@preconcurrency import Glibc
import TallyFileLock
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
