@preconcurrency import Glibc
import TallyNet
import TallyProtocol

/// Where the CLI's client commands connect and how they authenticate:
/// `--server`/`$TALLY_URL`, `--token`/`$TALLY_TOKEN` and `--insecure`.
struct HubAccess {
    var server: String?
    var token: String?
    /// Allows sending the token over plain ws:// or http:// to a host that
    /// is not loopback.
    var insecure = false

    static let valuedOptions: Set<String> = ["server", "token"]
    static let flagOptions: Set<String> = ["insecure"]
    static let help = """
      --server URL   the hub (default $TALLY_URL, else ws://127.0.0.1:8080)
      --token T      bearer token (default $TALLY_TOKEN); never sent in plain
                     text to a host that is not loopback unless --insecure
      --insecure     allow sending the token over ws:// or http:// anyway
    """

    init(server: String? = nil, token: String? = nil, insecure: Bool = false) {
        self.server = server
        self.token = token
        self.insecure = insecure
    }

    init(_ arguments: Arguments) {
        server = arguments.string("server")
        token = arguments.string("token") ?? getenv("TALLY_TOKEN").map { String(cString: $0) }
        if token?.isEmpty == true { token = nil }
        insecure = arguments.flag("insecure")
    }

    /// The hub's WebSocket URL (see `HubClient.resolveURL`).
    var url: String { HubClient.resolveURL(server) }

    /// The hub's HTTP base URL, e.g. "http://127.0.0.1:8080".
    var httpBase: String {
        var base = url
        if base.hasPrefix("ws://") { base = "http://" + base.dropFirst(5) }
        if base.hasPrefix("wss://") { base = "https://" + base.dropFirst(6) }
        if base.hasSuffix("/v1/ws") { base.removeLast(6) }
        while base.hasSuffix("/") { base.removeLast() }
        return base
    }

    /// Refuses to put a token on an unencrypted connection to a host that
    /// is not this machine (seed 000: "bearer tokens are not sent over
    /// unencrypted HTTP to public hosts").
    func checkTransport(_ url: String) throws(CLIError) {
        guard token != nil, !insecure else { return }
        let parsed: WebSocketURL
        do { parsed = try WebSocketURL(url) } catch { throw .unreachable(url, "\(error)") }
        guard !parsed.secure, !Self.isLoopback(parsed.host) else { return }
        throw .insecureToken(url)
    }

    /// Literal loopback hosts only: a name that merely resolves to loopback
    /// could resolve elsewhere tomorrow.
    static func isLoopback(_ host: String) -> Bool { HostLiteral.isLoopback(host) }
}
