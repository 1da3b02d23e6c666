@preconcurrency import Glibc
import Synchronization

/// The on-disk half of `BlobStore`: one file per blob under `root/ab/<sha>`.
///
/// A blob appears under its name only once its bytes are on stable storage:
/// it is written to a temporary file in the same directory, fsynced, then
/// linked to its name, and the directory is fsynced so the new name survives
/// a crash too (the recipe of fsync(2): "Calling fsync() does not
/// necessarily ensure that the entry in the directory containing the file has
/// also reached disk. For that an explicit fsync() on a file descriptor for
/// the directory is also needed."). So a reader never sees a partial blob,
/// and a name that exists is a complete blob.
///
/// Publishing uses link(2) rather than rename(2), as git does for its loose
/// objects (`finalize_object_file`): link fails with EEXIST instead of
/// replacing, which tells concurrent uploads of the same blob, in this or
/// another process, which one created it — with no lock. File systems
/// without hard links fall back to rename, which is as atomic but cannot
/// tell (the bytes are identical, so replacing is harmless).
final class BlobFiles: Sendable {
    let root: String
    /// Makes temporary names unique within the process; O_EXCL covers the rest.
    private let sequence = Atomic<UInt64>(0)
    /// Temporary files older than this at open were left by a crash.
    static let abandonedAfterSeconds = 3600

    init(root: String) {
        self.root = root
    }

    /// Creates `root` (and the data directory) when missing, mode 0700 like
    /// the SQLite store: photos are as private as records. Then removes
    /// temporary files a crash left behind.
    func prepare(dataDirectory: String) throws(BlobError) {
        var partial = root.hasPrefix("/") ? "" : "."
        var created = false
        for component in root.split(separator: "/") {
            partial += "/" + component
            created = mkdir(partial, 0o700) == 0
            if !created && errno != EEXIST {
                throw .storageFailed(operation: "create the blob directory", path: partial, errno: errno)
            }
        }
        if created { try syncDirectory(dataDirectory) }
        guard access(root, W_OK) == 0 else {
            throw .storageFailed(operation: "write to the blob directory", path: root, errno: errno)
        }
        removeAbandonedTemporaryFiles()
    }

    func path(_ sha256: String) -> String {
        "\(root)/\(sha256.prefix(2))/\(sha256)"
    }

    func exists(_ sha256: String) -> Bool {
        access(path(sha256), F_OK) == 0
    }

    /// Stores verified bytes durably. Returns whether this call created the
    /// file (false when it was already there, or another upload won the race).
    func write(_ sha256: String, _ bytes: [UInt8]) throws(BlobError) -> Bool {
        let final = path(sha256)
        if access(final, F_OK) == 0 { return false }
        let directory = "\(root)/\(sha256.prefix(2))"
        if mkdir(directory, 0o700) == 0 {
            // The new fan-out directory's own entry must survive a crash too.
            try syncDirectory(root)
        } else if errno != EEXIST {
            throw .storageFailed(operation: "create a blob directory", path: directory, errno: errno)
        }
        let (fd, temporary) = try createTemporary(in: directory)
        do throws(BlobError) {
            try writeAll(fd, bytes, path: temporary)
            guard fsync(fd) == 0 else { throw BlobError.storageFailed(operation: "fsync the blob", path: temporary, errno: errno) }
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        // After a successful fsync a failing close loses nothing, and Linux
        // releases the descriptor whatever close returns (close(2)).
        close(fd)

        let created: Bool
        if link(temporary, final) == 0 {
            created = true
        } else if errno == EEXIST {
            created = false
        } else if rename(temporary, final) == 0 {
            created = true
        } else {
            let failure = errno
            unlink(temporary)
            throw .storageFailed(operation: "store the blob", path: final, errno: failure)
        }
        unlink(temporary)
        try syncDirectory(directory)
        return created
    }

    /// The blob's bytes, or nil when no file has its name.
    func read(_ sha256: String) throws(BlobError) -> [UInt8]? {
        let file = path(sha256)
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw .storageFailed(operation: "open the blob", path: file, errno: errno)
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw .storageFailed(operation: "stat the blob", path: file, errno: errno) }
        let size = Int(status.st_size)
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            count = 0
            while count < size {
                let n = Glibc.read(fd, buffer.baseAddress! + count, size - count)
                if n > 0 { count += n; continue }
                if n < 0 && errno == EINTR { continue }
                if n < 0 { failure = errno }
                break
            }
        }
        guard failure == 0 else { throw .storageFailed(operation: "read the blob", path: file, errno: failure) }
        return bytes
    }

    /// Opens a fresh `.tmp-<pid>-<n>` file beside where the blob will live,
    /// so link and rename stay within one file system.
    private func createTemporary(in directory: String) throws(BlobError) -> (Int32, String) {
        let pid = getpid()
        while true {
            let number = sequence.add(1, ordering: .relaxed).newValue
            let temporary = "\(directory)/.tmp-\(pid)-\(number)"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 { return (fd, temporary) }
            // Left by an earlier process with the same pid: take the next number.
            if errno == EEXIST { continue }
            throw .storageFailed(operation: "create a temporary file", path: temporary, errno: errno)
        }
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(BlobError) {
        let failure = Self.writeFully(fd, bytes)
        guard failure == 0 else { throw .storageFailed(operation: "write the blob", path: path, errno: failure) }
    }

    /// Writes all of `bytes` to `fd`, through short writes and EINTR; 0, or
    /// the errno that stopped it (EIO for a write that wrote nothing).
    static func writeFully(_ fd: Int32, _ bytes: [UInt8]) -> Int32 {
        var failure: Int32 = 0
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n; continue }
                if n < 0 && errno == EINTR { continue }
                failure = n < 0 ? errno : EIO
                return
            }
        }
        return failure
    }

    func syncDirectory(_ directory: String) throws(BlobError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .storageFailed(operation: "open a blob directory", path: directory, errno: errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .storageFailed(operation: "fsync a blob directory", path: directory, errno: errno) }
    }

    /// Unlinks `.tmp-*` files older than `abandonedAfterSeconds` in the
    /// fan-out directories: uploads a crash cut short. Younger ones may
    /// belong to a store still writing, so they stay. Best effort: a file
    /// that cannot be removed only wastes space.
    func removeAbandonedTemporaryFiles() {
        let cutoff = time(nil) - time_t(BlobFiles.abandonedAfterSeconds)
        for fanOut in entries(of: root) where fanOut.utf8.count == 2 {
            let directory = "\(root)/\(fanOut)"
            for name in entries(of: directory) where name.hasPrefix(".tmp-") {
                let file = "\(directory)/\(name)"
                var status = stat()
                if lstat(file, &status) == 0, status.st_mtim.tv_sec < cutoff { unlink(file) }
            }
        }
    }

    /// Bytes of the blobs stored (temporary files left out): counted once
    /// at open, by one stat per blob.
    func totalBytes() -> Int {
        var total = 0
        for fanOut in entries(of: root) where fanOut.utf8.count == 2 {
            let directory = "\(root)/\(fanOut)"
            for name in entries(of: directory) where !name.hasPrefix(".tmp-") {
                var status = stat()
                if lstat("\(directory)/\(name)", &status) == 0, status.st_mode & S_IFMT == S_IFREG {
                    total += Int(status.st_size)
                }
            }
        }
        return total
    }

    func entries(of directory: String) -> [String] {
        guard let handle = opendir(directory) else { return [] }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
