@preconcurrency import Glibc
import CLinuxShim

/// A resolved IPv4 or IPv6 socket address.
struct SocketAddress {
    var storage = sockaddr_storage()
    var length: socklen_t = 0
    var family: Int32 { Int32(storage.ss_family) }

    /// Resolves `host` (a name or a literal) and `port` with getaddrinfo.
    /// Blocking: call it before handing work to a loop.
    static func resolve(host: String, port: Int, passive: Bool) throws(SystemError) -> SocketAddress {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host.isEmpty ? nil : host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            throw SystemError("getaddrinfo(\(host)): \(String(cString: gai_strerror(rc)))", errno: EINVAL)
        }
        defer { freeaddrinfo(result) }
        var address = SocketAddress()
        withUnsafeMutableBytes(of: &address.storage) { raw in
            raw.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        address.length = first.pointee.ai_addrlen
        return address
    }

    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// The port of a bound socket.
    static func localPort(of fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &length) }
        }
        if Int32(storage.ss_family) == AF_INET6 {
            return withUnsafePointer(to: storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                Int(UInt16(bigEndian: $0.pointee.sin6_port)) } }
        }
        return withUnsafePointer(to: storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
            Int(UInt16(bigEndian: $0.pointee.sin_port)) } }
    }
}
