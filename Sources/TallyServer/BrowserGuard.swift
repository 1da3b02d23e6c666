import TallyHTTP
import TallyNet
import TallyProtocol

/// Which browser requests the hub takes: the checks that keep a web page the
/// operator happens to visit from driving the hub on their behalf.
///
/// Two attacks, two checks:
/// - **Cross-site requests.** A page on another site can open a WebSocket to
///   the hub (browsers do not apply CORS to WebSockets) and send "simple"
///   POSTs (`text/plain`, no preflight). Browsers name the page's origin in
///   `Origin` on both (RFC 6454 §7, RFC 6455 §4.1 item 8; the Fetch
///   standard sends it on every non-GET request), so a WebSocket upgrade or
///   a state-changing request whose `Origin` is neither the hub's own nor
///   one the operator allowed is refused. Non-browser clients send no
///   `Origin` and are not affected. Writes over HTTP must also declare JSON
///   (`Content-Type: application/json`), which a page cannot send
///   cross-site without a CORS preflight the hub never answers.
/// - **DNS rebinding.** A page on `evil.example` whose name then resolves to
///   127.0.0.1 is same-origin with itself, so the Origin check passes; but
///   its requests carry `Host: evil.example`. A hub without authentication
///   therefore answers only to host names it can vouch for: loopback names
///   and addresses (and, with `--open`, any address literal, which no DNS
///   answer can rebind), plus the names the operator lists. A hub with users
///   needs no such check: the rebound page has no token.
public struct BrowserGuard: Sendable {
    /// Which `Host` values are taken.
    public enum HostRule: Sendable, Equatable {
        /// Any (a hub with users).
        case any
        /// Loopback names and addresses, plus `allowedHosts` (open mode on loopback).
        case loopback
        /// Any address literal and loopback names, plus `allowedHosts` (open mode with `--open`).
        case addresses
    }

    public var hostRule: HostRule
    /// Host names (lower case, no port) taken besides those of `hostRule`.
    public var allowedHosts: Set<String>
    /// Origins (`scheme://host[:port]`, lower case, default port left out)
    /// taken besides the hub's own.
    public var allowedOrigins: Set<String>

    public init(hostRule: HostRule = .any, allowedHosts: [String] = [], allowedOrigins: [String] = []) {
        self.hostRule = hostRule
        self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
        self.allowedOrigins = Set(allowedOrigins.compactMap(Self.normalizedOrigin))
    }

    /// The refusal for `request`, or nil to go on.
    /// - Parameter upgrade: the request asks for a WebSocket.
    public func check(_ request: HTTPRequest, isTLS: Bool, upgrade: Bool) -> ProtocolError? {
        let host = request.headers["Host"]
        if hostRule != .any, let host, !takes(host: host) {
            let name = Self.hostName(host)
            return ProtocolError(.hostNotAllowed, "this hub runs without authentication and answers only to \(hostRule == .loopback ? "loopback names and addresses" : "addresses and loopback names"); 'Host: \(host)' may be a DNS-rebinding page. If you reach the hub by that name, start it with --allow-host \(name) (or \"allowHosts\" in the config file)", details: ["host": .string(host)])
        }
        guard upgrade || Self.changesState(request.method), let origin = request.headers["Origin"] else { return nil }
        guard !takes(origin: origin, host: host, isTLS: isTLS) else { return nil }
        let own = host.map { "\(isTLS ? "https" : "http")://\($0)" } ?? "its own"
        return ProtocolError(.originNotAllowed, "requests from web pages at \(origin) are refused: the hub takes browser requests from its own origin (\(own)) only. To let that page in, start the hub with --allow-origin \(origin) (or \"allowOrigins\" in the config file)", details: ["origin": .string(origin)])
    }

    /// Whether an HTTP write declares its JSON body; nil when it does,
    /// else the 415 to answer. Requests without a body need no type.
    public static func checkJSONBody(_ request: HTTPRequest, hasBody: Bool) -> ProtocolError? {
        guard hasBody, changesState(request.method) else { return nil }
        if let type = request.headers["Content-Type"], isJSON(type) { return nil }
        let given = request.headers["Content-Type"].map { "'\($0)'" } ?? "none"
        return ProtocolError(.unsupportedMediaType,
                             "send the body as JSON with 'Content-Type: application/json' (got \(given))")
    }

    /// `application/json`, or a `+json` type such as RFC 7396's
    /// `application/merge-patch+json`, with any parameters.
    static func isJSON(_ contentType: String) -> Bool {
        let type = contentType.split(separator: ";", maxSplits: 1).first.map { REST.trimmed(String($0)).lowercased() } ?? ""
        return type == "application/json" || (type.hasPrefix("application/") && type.hasSuffix("+json"))
    }

    /// Methods that may change state (RFC 9110 §9.2.1: all but the safe ones).
    static func changesState(_ method: String) -> Bool {
        !(method == "GET" || method == "HEAD" || method == "OPTIONS")
    }

    func takes(host: String) -> Bool {
        let name = Self.hostName(host)
        if allowedHosts.contains(name) || Self.isLoopbackName(name) { return true }
        switch hostRule {
        case .any: return true
        case .loopback: return Self.isLoopbackAddress(name)
        case .addresses: return Self.isAddressLiteral(name)
        }
    }

    func takes(origin: String, host: String?, isTLS: Bool) -> Bool {
        guard let normalized = Self.normalizedOrigin(origin) else { return false }
        if allowedOrigins.contains(normalized) { return true }
        guard let host else { return false }
        return normalized == Self.normalizedOrigin("\(isTLS ? "https" : "http")://\(host)")
    }

    /// `HTTP://Example.COM:80` → `http://example.com`; nil for `null` and
    /// anything that is not `scheme://host[:port]`.
    public static func normalizedOrigin(_ origin: String) -> String? {
        let lower = REST.trimmed(origin).lowercased()
        let parts = lower.split(separator: "://", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let scheme = String(parts[0])
        var authority = String(parts[1])
        if authority.hasSuffix("/") { authority.removeLast() }
        guard scheme == "http" || scheme == "https", !authority.isEmpty, !authority.contains("/"),
              !authority.contains("@") else { return nil }
        let defaultPort = scheme == "http" ? ":80" : ":443"
        if authority.hasSuffix(defaultPort) { authority.removeLast(defaultPort.count) }
        return "\(scheme)://\(authority)"
    }

    /// The name in a `Host` value: lower case, without the port;
    /// `[::1]:8080` → `::1`.
    static func hostName(_ host: String) -> String {
        let lower = REST.trimmed(host).lowercased()
        if lower.hasPrefix("[") {
            guard let close = lower.firstIndex(of: "]") else { return lower }
            return String(lower[lower.index(after: lower.startIndex)..<close])
        }
        if let colon = lower.lastIndex(of: ":"), lower.firstIndex(of: ":") == colon {
            return String(lower[..<colon])
        }
        return lower
    }

    /// Whether `name` can be a `Host` name to allow: letters, digits, `-`,
    /// `.`, or an address literal; no scheme, port or path.
    public static func isHostName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 253
            && (isAddressLiteral(name.lowercased())
                || name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") })
    }

    /// `localhost` and names under it (RFC 6761 §6.3: they resolve to loopback).
    static func isLoopbackName(_ name: String) -> Bool {
        let name = name.hasSuffix(".") ? String(name.dropLast()) : name
        return name == "localhost" || name.hasSuffix(".localhost")
    }

    static func isLoopbackAddress(_ name: String) -> Bool { HostLiteral.isLoopbackAddress(name) }

    static func isAddressLiteral(_ name: String) -> Bool { HostLiteral.isAddress(name) }
}
