@preconcurrency import Glibc
import CLinuxShim

/// A failed system call: which call and the errno it left.
public struct SystemError: Error, Sendable, CustomStringConvertible {
    public var call: String
    public var errno: Int32
    public init(_ call: String, errno: Int32) { self.call = call; self.errno = errno }
    public var description: String {
        "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// The outcome of a non-blocking read or write: EAGAIN is a value, not an error.
enum IOResult: Equatable {
    case processed(Int)
    case wouldBlock
}

/// Thin wrappers over the system calls TallyNet makes. Each retries EINTR,
/// turns EAGAIN into `.wouldBlock` and every other failure into a `SystemError`.
enum Sys {
    @inline(__always)
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return .processed(n) }
            let e = Glibc.errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            throw SystemError("read", errno: e)
        }
    }

    @inline(__always)
    static func write(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) throws(SystemError) -> IOResult {
        while true {
            // send(MSG_NOSIGNAL): a peer that went away must not kill the hub with SIGPIPE.
            let n = Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .processed(n) }
            let e = Glibc.errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            throw SystemError("send", errno: e)
        }
    }

    @inline(__always)
    static func writev(_ fd: Int32, _ iov: UnsafePointer<iovec>, _ count: Int) throws(SystemError) -> IOResult {
        while true {
            let n = Glibc.writev(fd, iov, Int32(count))
            if n >= 0 { return .processed(n) }
            let e = Glibc.errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            throw SystemError("writev", errno: e)
        }
    }

    static func close(_ fd: Int32) {
        // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
        _ = Glibc.close(fd)
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Monotonic milliseconds, for timeouts.
    static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
