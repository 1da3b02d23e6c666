import TallyNet

/// Where a one-shot client connects and how it authenticates: the hub's
/// URL, the bearer token, and whether the token may travel in clear text.
public struct HubAccess: Sendable {
    /// The hub as given (`--server`); nil for `defaultURL`.
    public var server: String?
    public var token: String?
    /// Allows sending the token over plain ws:// or http:// to a host that
    /// is not loopback.
    public var insecure: Bool
    /// The hub when `server` is nil (the CLI: `$TALLY_URL`, else
    /// ws://127.0.0.1:8080).
    public var defaultURL: String

    public init(server: String? = nil, token: String? = nil, insecure: Bool = false,
                defaultURL: String = "ws://127.0.0.1:8080") {
        self.server = server
        self.token = token
        self.insecure = insecure
        self.defaultURL = defaultURL
    }

    /// The hub's WebSocket URL: http(s):// becomes ws(s)://, and a URL
    /// without a path gets `/v1/ws` (`TallyClient.normalize`).
    public var url: String { TallyClient.normalize(server ?? defaultURL) }

    /// The hub's HTTP base URL, e.g. "http://127.0.0.1:8080".
    public var httpBase: String {
        var base = url
        if base.hasPrefix("ws://") { base = "http://" + base.dropFirst(5) }
        if base.hasPrefix("wss://") { base = "https://" + base.dropFirst(6) }
        if base.hasSuffix("/v1/ws") { base.removeLast(6) }
        while base.hasSuffix("/") { base.removeLast() }
        return base
    }

    /// Refuses to put a token on an unencrypted connection to a host that
    /// is not this machine (seed 000: "bearer tokens are not sent over
    /// unencrypted HTTP to public hosts"). Only literal loopback hosts
    /// count: a name that resolves to loopback could resolve elsewhere tomorrow.
    public func checkTransport(_ url: String) throws(HubError) {
        guard token != nil, !insecure else { return }
        let parsed: WebSocketURL
        do { parsed = try WebSocketURL(url) } catch { throw .unreachable(url: url, reason: "\(error)") }
        guard !parsed.secure, !parsed.isLoopback else { return }
        throw .insecureToken(url: url)
    }
}
