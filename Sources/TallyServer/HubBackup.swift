@preconcurrency import Glibc
import TallyStore

/// Backups of a hub's data directory (`tally backup`, `tally restore`): the
/// SQLite store and the photos, taken while the hub runs and writes, and put
/// back in place of a lost or damaged store.
///
/// A backup is a directory laid out like a data directory, so it is easy to
/// look into (`sqlite3 DEST/tally.sqlite3`):
///
/// ```
/// DEST/tally.sqlite3      the store as of one commit (SQLiteBackup.copy), checked
/// DEST/blobs/ab/ab…       every photo the data directory held when the store was copied
/// DEST/tally-backup.json  written last: the backup is complete (BackupManifest)
/// ```
///
/// The store is copied first and the photos after it: a record names a
/// photo only once the photo is stored, and photos are never deleted, so
/// every photo the copied records name is there by the time the photos are
/// copied (later uploads come along too, unnamed by any record, harmless).
/// Taking a backup reads the store through its own connection and never
/// takes the data directory's lock: the hub goes on serving and writing.
public enum HubBackup {
    /// Where `restore --force` keeps the store it replaced, in the data directory.
    public static let replacedStoreName = SQLiteStore.fileName + ".replaced"
    /// The restored copy, before it is renamed into place.
    static let restoringStoreName = SQLiteStore.fileName + ".restoring"

    /// What `backUp` made.
    public struct BackupReport: Sendable {
        public var manifest: BackupManifest
        /// How the photos got there: hard links (same file system) or copies.
        public var photosLinked: Int
        public var photosCopied: Int
        /// The copied store's size in bytes.
        public var storeBytes: Int64
    }

    /// Copies the store and the photos of `dataDirectory` into `destination`,
    /// a new directory (created, mode 0700, in an existing parent) or an
    /// empty one. Works whether or not a hub runs on `dataDirectory`.
    ///
    /// On failure nothing is left behind: what was written into
    /// `destination` is removed (and the directory too, when it was made here).
    public static func backUp(dataDirectory: String, to destination: String,
                              clock: StoreClock = .system) throws(BackupError) -> BackupReport {
        let directory = trimmed(dataDirectory)
        let destination = trimmed(destination)
        let store = directory + "/" + SQLiteStore.fileName
        guard access(store, F_OK) == 0 else { throw .noStore(directory: directory) }
        let created = try prepareDestination(destination)
        do throws(BackupError) {
            let taken = clock.now()
            let summary: SQLiteBackup.Summary
            do {
                summary = try SQLiteBackup.copy(from: store, to: destination + "/" + SQLiteStore.fileName)
            } catch {
                throw .store(directory: directory, error)
            }
            let photos = try copyPhotos(from: directory, into: destination)
            let manifest = BackupManifest(store: summary, photos: photos, created: taken)
            try manifest.write(to: destination)
            return BackupReport(manifest: manifest, photosLinked: photos.linked, photosCopied: photos.copied,
                                storeBytes: summary.bytes)
        } catch {
            removeContents(of: destination)
            if created { rmdir(destination) }
            throw error
        }
    }

    /// Puts the photos of data directory (or backup) `source` that
    /// `target` lacks into `target/blobs`.
    static func copyPhotos(from source: String, into target: String) throws(BackupError) -> BlobFiles.CopyCount {
        let into = BlobFiles(root: target + "/blobs")
        do { try into.prepare(dataDirectory: target) } catch { throw BackupError(error) }
        let from = BlobFiles(root: source + "/blobs")
        guard isDirectory(from.root) else { return BlobFiles.CopyCount() }
        return try from.copyMissing(into: into)
    }

    /// Makes sure `destination` is a new or empty directory; true when it
    /// was created here.
    private static func prepareDestination(_ destination: String) throws(BackupError) -> Bool {
        var status = stat()
        if stat(destination, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFDIR else { throw .destinationNotADirectory(destination: destination) }
            guard isEmptyDirectory(destination) else { throw .destinationNotEmpty(destination: destination) }
            guard access(destination, W_OK) == 0 else {
                throw .fileSystem(operation: "write into", path: destination, errno: errno)
            }
            return false
        }
        guard errno == ENOENT else { throw .fileSystem(operation: "look at", path: destination, errno: errno) }
        let parent = parentDirectory(of: destination)
        guard isDirectory(parent) else { throw .destinationParentMissing(destination: destination, parent: parent) }
        guard mkdir(destination, 0o700) == 0 else {
            throw .fileSystem(operation: "create the directory", path: destination, errno: errno)
        }
        try syncDirectory(parent)
        return true
    }

    // MARK: Files

    /// Without trailing slashes (but `/` stays `/`).
    static func trimmed(_ path: String) -> String {
        var path = Substring(path)
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        return String(path)
    }

    static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func isDirectory(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
    }

    static func isEmptyDirectory(_ path: String) -> Bool {
        guard let handle = opendir(path) else { return false }
        defer { closedir(handle) }
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { return false }
        }
        return true
    }

    /// Removes everything inside `directory` (not following symbolic links).
    /// Best effort: used only to take back a backup that failed.
    static func removeContents(of directory: String) {
        guard let handle = opendir(directory) else { return }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(handle)
        for name in names {
            let path = directory + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0 else { continue }
            if status.st_mode & S_IFMT == S_IFDIR {
                removeContents(of: path)
                rmdir(path)
            } else {
                unlink(path)
            }
        }
    }

    /// fsync(2) on a directory, so the names created or renamed in it
    /// survive a crash.
    static func syncDirectory(_ directory: String) throws(BackupError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .fileSystem(operation: "open the directory", path: directory, errno: errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .fileSystem(operation: "fsync the directory", path: directory, errno: errno) }
    }
}
