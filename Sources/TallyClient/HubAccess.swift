import TallyNet

/// Where a one-shot client connects and how it authenticates: the hubs'
/// URLs in the order to try them, the bearer token, and whether the token
/// may travel in clear text.
///
/// Several hubs that share one database (`tally serve --store
/// postgres://…`) give every change the same seq, so a client may move
/// from one to another and resume where it was: a list names the hubs of
/// one such cluster, the first the one to try first.
public struct HubAccess: Sendable {
    /// The hubs as given (`--server a,b`), in the order to try them; empty
    /// when none was given, and then `defaultURLs` count.
    public var servers: [String]
    public var token: String?
    /// Allows sending the token over plain ws:// or http:// to a host that
    /// is not loopback.
    public var insecure: Bool
    /// The hubs when `servers` is empty (the CLI: `$TALLY_SERVER`, else
    /// `$TALLY_URL`, else ws://127.0.0.1:8080).
    public var defaultURLs: [String]

    /// The hub a client uses when nothing names one.
    public static let localHub = "ws://127.0.0.1:8080"

    public init(servers: [String] = [], token: String? = nil, insecure: Bool = false,
                defaultURLs: [String] = [HubAccess.localHub]) {
        self.servers = servers
        self.token = token
        self.insecure = insecure
        self.defaultURLs = defaultURLs
    }

    /// One hub (`server`, nil for `defaultURL`).
    public init(server: String?, token: String? = nil, insecure: Bool = false,
                defaultURL: String = HubAccess.localHub) {
        self.init(servers: server.map { [$0] } ?? [], token: token, insecure: insecure, defaultURLs: [defaultURL])
    }

    /// The hubs in the order to try them, as given: never empty.
    public var hubs: [String] {
        let hubs = servers.isEmpty ? defaultURLs : servers
        return hubs.isEmpty ? [Self.localHub] : hubs
    }

    /// The hubs' WebSocket URLs: http(s):// becomes ws(s)://, and a URL
    /// without a path gets `/v1/ws` (`TallyClient.normalize`).
    public var urls: [String] { hubs.map(TallyClient.normalize) }

    /// The first hub's WebSocket URL.
    public var url: String { urls[0] }

    /// The hubs' HTTP base URLs, e.g. "http://127.0.0.1:8080".
    public var httpBases: [String] { urls.map(Self.httpBase(of:)) }

    /// The first hub's HTTP base URL.
    public var httpBase: String { httpBases[0] }

    /// The hubs' HTTP bases, comma-separated: the hub an intake job is bound
    /// to (one hub: its base, as jobs recorded it before lists).
    public var jobHub: String { httpBases.joined(separator: ",") }

    /// The list as one text, as a mirror store keeps it:
    /// the hubs as given, or the default's WebSocket URL(s), comma-separated.
    public var label: String { (servers.isEmpty ? urls : servers).joined(separator: ",") }

    /// This access, starting with the hub at `index` of `urls` and going
    /// round the list from there (the hub after a failed one first).
    public func rotated(from index: Int) -> HubAccess {
        var copy = self
        let hubs = self.hubs
        let start = ((index % hubs.count) + hubs.count) % hubs.count
        copy.servers = Array(hubs[start...] + hubs[..<start])
        return copy
    }

    /// The HTTP base of a WebSocket URL (`ws://h:1/v1/ws` → `http://h:1`).
    static func httpBase(of url: String) -> String {
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

    /// `checkTransport` for every hub of the list, before any is tried: a
    /// client that fails over must not send the token in clear to a later one.
    public func checkTransports() throws(HubError) {
        for url in urls { try checkTransport(url) }
    }

    /// Whether two lists (`label`s, or single URLs) name a hub in common,
    /// compared as WebSocket URLs: resume points of one are good on the
    /// other (hubs of one cluster share the seqs).
    public static func shareAHub(_ one: String, _ other: String) -> Bool {
        let mine = Set(elements(one).map(TallyClient.normalize))
        return elements(other).contains { mine.contains(TallyClient.normalize($0)) }
    }

    /// The elements of a comma-separated list, spaces around them trimmed.
    static func elements(_ text: String) -> [String] {
        text.split(separator: ",", omittingEmptySubsequences: false).map {
            String($0.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
        }
    }

    /// A comma-separated list of hub URLs (`--server`, `$TALLY_SERVER`, a
    /// config file's `peers`): each one ws://, wss://, http:// or https://
    /// with a host, spaces around them ignored.
    /// - Throws: `HubListError` naming the first element that is empty or
    ///   not such a URL.
    public static func parseList(_ text: String) throws(HubListError) -> [String] {
        let elements = elements(text)
        for (index, element) in elements.enumerated() {
            guard !element.isEmpty else {
                throw HubListError(list: text, position: index + 1, element: element,
                                   reason: "is empty: separate the URLs with single commas")
            }
            do { _ = try WebSocketURL(TallyClient.normalize(element)) } catch {
                let why = if case .invalidURL(let message) = error { message } else { "\(error)" }
                throw HubListError(list: text, position: index + 1, element: element,
                                   reason: "is not a hub URL: \(why)")
            }
        }
        return elements
    }
}

/// A list of hubs with an element that cannot be used: which one and why.
public struct HubListError: Error, Sendable, Equatable, CustomStringConvertible {
    public var list: String
    /// 1 for the first element.
    public var position: Int
    public var element: String
    public var reason: String

    public var description: String {
        element.isEmpty ? "hub \(position) of '\(list)' \(reason)" : "hub \(position), '\(element)', \(reason)"
    }
}
