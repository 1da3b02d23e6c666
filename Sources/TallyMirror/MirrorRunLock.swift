@preconcurrency import Glibc

/// The lock that makes `mirror run` one per store: an exclusive
/// open-file-description lock (`F_OFD_SETLK`, fcntl(2)) on `<store>.lock`.
///
/// - It is released when the run closes the file or ends however it ends,
///   so a SIGKILLed run leaves no stale lock.
/// - `isHeld` asks with `F_OFD_GETLK`, which reports a conflicting lock
///   without taking one. A probe that took the lock for a moment (flock(2)
///   has no other way to ask) made a `mirror run` starting at that moment
///   believe another run held the store, and exit.
/// - Open-file-description locks belong to the open file, not the process
///   (unlike classic POSIX record locks), so two opens in one process
///   exclude each other just as two processes do.
public final class MirrorRunLock {
    private var fd: Int32

    // Glibc declares these only under _GNU_SOURCE, which Swift's Glibc
    // module is not built with; the values are Linux's ABI
    // (<bits/fcntl-linux.h>, Linux 3.15 and later).
    private static let ofdGetLock: Int32 = 36  // F_OFD_GETLK
    private static let ofdSetLock: Int32 = 37  // F_OFD_SETLK

    private init(fd: Int32) { self.fd = fd }

    /// The lock for the store at `path`; nil when another run holds it.
    public static func acquire(store path: String) throws(MirrorStoreError) -> MirrorRunLock? {
        let fd = try openLockFile(store: path, create: true)
        var request = wholeFile(F_WRLCK)
        while fcntl(fd, ofdSetLock, &request) != 0 {
            if errno == EINTR { continue }
            let busy = errno == EAGAIN || errno == EACCES
            let reason = String(cString: strerror(errno))
            close(fd)
            if busy { return nil }
            throw MirrorStoreError("cannot lock '\(path).lock': \(reason)")
        }
        return MirrorRunLock(fd: fd)
    }

    /// Whether a run holds the lock right now. Never takes it.
    public static func isHeld(store path: String) throws(MirrorStoreError) -> Bool {
        guard access("\(path).lock", F_OK) == 0 else { return false }
        let fd = try openLockFile(store: path, create: false)
        defer { close(fd) }
        var query = wholeFile(F_WRLCK)
        while fcntl(fd, ofdGetLock, &query) != 0 {
            if errno == EINTR { continue }
            throw MirrorStoreError("cannot ask whether '\(path).lock' is locked: \(String(cString: strerror(errno)))")
        }
        return query.l_type != Int16(F_UNLCK)
    }

    public func release() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { release() }

    private static func openLockFile(store path: String, create: Bool) throws(MirrorStoreError) -> Int32 {
        let fd = open("\(path).lock", O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0o600)
        guard fd >= 0 else {
            throw MirrorStoreError("cannot open the lock file '\(path).lock': \(String(cString: strerror(errno)))")
        }
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
