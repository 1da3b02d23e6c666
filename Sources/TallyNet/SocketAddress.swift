@preconcurrency import Glibc
import CLinuxShim

/// A resolved IPv4 or IPv6 socket address.
struct SocketAddress {
    var storage = sockaddr_storage()
    var length: socklen_t = 0
    var family: Int32 { Int32(storage.ss_family) }

    /// Why getaddrinfo found no address: the host asked for and the
    /// resolver's own words (`gai_strerror`).
    struct ResolveError: Error {
        var host: String
        var reason: String
    }

    /// Resolves `host` (a name or a literal) and `port` with getaddrinfo:
    /// the first address. Blocking: call it before handing work to a loop.
    static func resolve(host: String, port: Int, passive: Bool) throws(SystemError) -> SocketAddress {
        do {
            // resolveAll never returns an empty list.
            return try resolveAll(host: host, port: port, passive: passive)[0]
        } catch {
            throw SystemError("getaddrinfo(\(host)): \(error.reason)", errno: EINVAL)
        }
    }

    /// Every address getaddrinfo gives for `host` and `port`, in its order
    /// (RFC 6724's preferences), so a client can try each in turn. The one
    /// place Tally resolves names. Blocking.
    static func resolveAll(host: String, port: Int, passive: Bool) throws(ResolveError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host.isEmpty ? nil : host, String(port), &hints, &result)
        guard rc == 0, result != nil else {
            throw ResolveError(host: host, reason: String(cString: gai_strerror(rc)))
        }
        defer { freeaddrinfo(result) }
        var addresses: [SocketAddress] = []
        var entry = result
        while let info = entry {
            entry = info.pointee.ai_next
            guard let raw = info.pointee.ai_addr else { continue }
            var address = SocketAddress()
            let length = min(Int(info.pointee.ai_addrlen), MemoryLayout<sockaddr_storage>.size)
            withUnsafeMutableBytes(of: &address.storage) { storage in
                storage.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: length))
            }
            address.length = socklen_t(length)
            addresses.append(address)
        }
        guard !addresses.isEmpty else { throw ResolveError(host: host, reason: "no address") }
        return addresses
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
