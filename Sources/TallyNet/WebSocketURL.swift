@preconcurrency import Glibc

/// A `ws://` or `wss://` URL split into what a client needs
/// (`http(s)://` are accepted as their WebSocket equivalents).
public struct WebSocketURL: Sendable, Equatable {
    public var secure: Bool
    public var host: String
    public var port: Int
    /// Path and query, e.g. "/v1/ws?x=1".
    public var requestTarget: String

    public init(_ text: String) throws(ClientError) {
        let schemes = [("ws://", false), ("wss://", true), ("http://", false), ("https://", true)]
        guard let (prefix, secure) = schemes.first(where: { text.lowercased().hasPrefix($0.0) }) else {
            throw .invalidURL("'\(text)' must start with ws://, wss://, http:// or https://")
        }
        self.secure = secure
        let rest = text.dropFirst(prefix.count)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var target = String(rest.dropFirst(authority.count).prefix { $0 != "#" })
        if target.isEmpty { target = "/" } else if target.hasPrefix("?") { target = "/" + target }
        requestTarget = target
        guard !authority.isEmpty, !authority.contains("@") else {
            throw .invalidURL("'\(text)' has no host (or has credentials, which are not supported)")
        }
        var hostPart = Substring(authority)
        var portPart: Substring?
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else { throw .invalidURL("unclosed '[' in '\(text)'") }
            let after = hostPart[hostPart.index(after: close)...]
            hostPart = hostPart[hostPart.index(after: hostPart.startIndex)..<close]
            if after.hasPrefix(":") { portPart = after.dropFirst() } else if !after.isEmpty {
                throw .invalidURL("unexpected '\(after)' after the host in '\(text)'")
            }
        } else if let colon = hostPart.lastIndex(of: ":") {
            portPart = hostPart[hostPart.index(after: colon)...]
            hostPart = hostPart[..<colon]
        }
        host = String(hostPart)
        if let portPart {
            guard let port = Int(portPart), (1...65535).contains(port) else {
                throw .invalidURL("port '\(portPart)' in '\(text)' is not a number from 1 to 65535")
            }
            self.port = port
        } else {
            port = secure ? 443 : 80
        }
        guard !host.isEmpty else { throw .invalidURL("'\(text)' has no host") }
    }

    /// A Tally hub's sync endpoint for a URL as people write it:
    /// `http://` becomes `ws://`, `https://` `wss://`, and a URL without a
    /// path gets `/v1/ws` (`ws://h:8080` → `ws://h:8080/v1/ws`). Anything
    /// else is left as it is, for `init` to judge.
    public static func hubEndpoint(_ url: String) -> String {
        var url = url
        if url.hasPrefix("http://") { url = "ws://" + url.dropFirst(7) }
        if url.hasPrefix("https://") { url = "wss://" + url.dropFirst(8) }
        let parts = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        if parts.count >= 3, parts[0].hasSuffix(":"), parts[1].isEmpty {
            if parts.count == 3 { url += "/v1/ws" } else if parts.count == 4, parts[3].isEmpty { url += "v1/ws" }
        }
        return url
    }

    /// The `Host` header value (RFC 9112 §3.2): the port only when not the default.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? name : "\(name):\(port)"
    }

    /// Whether the host is a loopback address (tokens may go there in clear text).
    /// Only literal addresses count (a DNS name such as `127.attacker.example`
    /// is not loopback, whatever its first label says).
    public var isLoopback: Bool { HostLiteral.isLoopback(host) }
}
