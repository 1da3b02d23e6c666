@preconcurrency import Glibc
import Synchronization

/// An exclusive lock on a lock file, so that one process at a time uses
/// what the file guards: a hub's data directory (`tally.lock` in it), a
/// mirror's store (`<store>.lock`). The holder's PID is written into the
/// file, so whoever finds it taken can say who holds it.
///
/// - It is an open-file-description lock (`F_OFD_SETLK`, fcntl(2)),
///   released when the holder closes the file or ends however it ends, so
///   a SIGKILLed holder leaves no stale lock; the PID left in the file then
///   means nothing, and the next holder overwrites it.
/// - Open-file-description locks belong to the open file, not the process
///   (unlike classic POSIX record locks), so two opens in one process
///   exclude each other just as two processes do.
/// - `isHeld` asks with `F_OFD_GETLK`, which reports a conflicting lock
///   without taking one. A probe that took the lock for a moment (flock(2)
///   has no other way to ask) made a process starting at that moment
///   believe another held it, and exit.
/// - `F_OFD_GETLK` reports `l_pid` as -1 for an open-file-description lock
///   (fcntl(2)), hence the PID in the file.
public final class FileLock: Sendable {
    public let path: String
    /// -1 once released.
    private let descriptor: Atomic<Int32>

    // Glibc declares these only under _GNU_SOURCE, which Swift's Glibc
    // module is not built with; the values are Linux's ABI
    // (<bits/fcntl-linux.h>, Linux 3.15 and later).
    private static let ofdGetLock: Int32 = 36  // F_OFD_GETLK
    private static let ofdSetLock: Int32 = 37  // F_OFD_SETLK

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = Atomic(descriptor)
    }

    deinit { release() }

    /// Takes the lock on `path` (creating the file, mode 0600, when
    /// missing) and writes this process's PID into it; nil when another
    /// open file holds it. Never waits.
    public static func acquire(_ path: String) throws(FileLockError) -> FileLock? {
        let fd = try open(path, create: true)
        var request = wholeFile(F_WRLCK)
        while fcntl(fd, ofdSetLock, &request) != 0 {
            if errno == EINTR { continue }
            let failure = errno
            close(fd)
            if failure == EAGAIN || failure == EACCES { return nil }
            throw FileLockError(.lock, path: path, errno: failure)
        }
        // Best effort: the lock is what counts, the PID only names its holder
        // (and a full disk must not keep a hub from starting to answer reads).
        let text = Array("\(getpid())\n".utf8)
        let written = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        if written == text.count { _ = ftruncate(fd, off_t(text.count)) }
        return FileLock(path: path, descriptor: fd)
    }

    /// Whether some open file holds the lock on `path` right now. Never
    /// takes it; false when the file does not exist.
    public static func isHeld(_ path: String) throws(FileLockError) -> Bool {
        guard access(path, F_OK) == 0 else { return false }
        let fd = try open(path, create: false)
        defer { close(fd) }
        var query = wholeFile(F_WRLCK)
        while fcntl(fd, ofdGetLock, &query) != 0 {
            if errno == EINTR { continue }
            throw FileLockError(.query, path: path, errno: errno)
        }
        return query.l_type != Int16(F_UNLCK)
    }

    /// The PID written into `path` by the process that last took the lock,
    /// when the file holds one (it may be stale once that process ended).
    public static func recordedHolder(of path: String) -> Int32? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self)
        guard let pid = Int32(text.split(separator: "\n").first ?? ""), pid > 0 else { return nil }
        return pid
    }

    /// Lets the lock go (closes the file). Idempotent; thread-safe.
    public func release() {
        let fd = descriptor.exchange(-1, ordering: .acquiringAndReleasing)
        if fd >= 0 { close(fd) }
    }

    private static func open(_ path: String, create: Bool) throws(FileLockError) -> Int32 {
        let fd = Glibc.open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0o600)
        guard fd >= 0 else { throw FileLockError(.open, path: path, errno: errno) }
        return fd
    }

    /// A request for the whole file; fcntl(2) requires `l_pid` 0 for
    /// open-file-description locks.
    private static func wholeFile(_ type: Int32) -> Glibc.flock {
        var request = Glibc.flock()
        request.l_type = Int16(type)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = 0
        request.l_len = 0
        request.l_pid = 0
        return request
    }
}

/// A lock file that could not be opened, locked or asked about; `errno`
/// says why (EACCES and EROFS: the directory or file is not writable).
public struct FileLockError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Operation: Sendable, Equatable {
        case open
        case lock
        case query
    }

    public var operation: Operation
    public var path: String
    public var errno: Int32

    public init(_ operation: Operation, path: String, errno: Int32) {
        self.operation = operation
        self.path = path
        self.errno = errno
    }

    public var description: String {
        let reason = String(cString: strerror(errno))
        switch operation {
        case .open: return "cannot open the lock file '\(path)': \(reason)"
        case .lock: return "cannot lock '\(path)': \(reason)"
        case .query: return "cannot ask whether '\(path)' is locked: \(reason)"
        }
    }
}
