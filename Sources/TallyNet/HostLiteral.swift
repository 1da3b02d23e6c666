@preconcurrency import Glibc

/// What a host string is, judged from its text alone (no DNS): the one place
/// the CLI (tokens in clear text), `tally serve` (open mode) and the hub's
/// `Host` check decide whether a host is loopback.
public enum HostLiteral {
    /// An IPv4 dotted quad or an IPv6 address, as `inet_pton` reads them.
    public static func isAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// 127.0.0.0/8 or ::1. A name is never a loopback address, whatever its
    /// first label says (`127.attacker.example`).
    public static func isLoopbackAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        return withUnsafeBytes(of: v6) { $0.dropLast().allSatisfy { $0 == 0 } && $0.last == 1 }
    }

    /// A loopback address, or `localhost`.
    public static func isLoopback(_ host: String) -> Bool {
        host.lowercased() == "localhost" || isLoopbackAddress(host)
    }
}
