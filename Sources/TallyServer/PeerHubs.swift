import TallyNet
import TallyProtocol

/// The other hubs of this hub's cluster (`tally serve --peers`, the config
/// file's `peers`): hubs on the same PostgreSQL database, to which a client
/// that loses this hub may move and resume, since they give every change
/// the same seq.
///
/// The hub never connects to them; it tells browsers about them. `GET
/// /v1/hubs` lists them for the board, the board's page may open
/// WebSockets to them (the `connect-src` of its Content-Security-Policy),
/// and the pages they serve may open WebSockets here (their origins count
/// as allowed, like `--allow-origin`'s: a board loaded from a peer comes
/// here when that peer goes).
public struct PeerHubs: Sendable, Equatable {
    /// Their sync endpoints (`ws(s)://host:port/v1/ws`), in the order
    /// given, each once.
    public private(set) var urls: [String] = []

    public init() {}

    /// Peers as given (http(s):// and URLs without a path are adjusted as
    /// clients adjust them).
    /// - Throws: `Invalid` for the first that is not a hub's URL.
    public init(_ given: [String]) throws(Invalid) {
        for (index, text) in given.enumerated() {
            guard let url = Self.endpoint(text) else {
                throw Invalid(index: index, text: text, message: Self.problem(text) ?? "is not a hub's URL")
            }
            if !urls.contains(url) { urls.append(url) }
        }
    }

    /// A peer that is not a hub's URL: where it is in the list and why.
    public struct Invalid: Error, Sendable, Equatable {
        /// 0 for the first.
        public var index: Int
        public var text: String
        public var message: String
    }

    /// What is wrong with a peer's URL, in words that say what to write
    /// instead; nil when it is fine.
    public static func problem(_ text: String) -> String? {
        endpoint(text) == nil
            ? "must be a hub's URL such as \"ws://10.0.0.2:8080\" (ws://, wss://, http:// or https://, a host, an optional port and path)"
            : nil
    }

    /// The sync endpoint `text` names, nil when it names none.
    static func endpoint(_ text: String) -> String? {
        let url = WebSocketURL.hubEndpoint(text)
        return (try? WebSocketURL(url)) == nil ? nil : url
    }

    /// The origins of the pages they serve (`http(s)://host[:port]`).
    public var origins: [String] {
        parsed.map { "\($0.secure ? "https" : "http")://\($0.hostHeader)" }
    }

    /// Their `connect-src` sources: scheme, host and port of each endpoint.
    public var connectSources: [String] {
        parsed.map { "\($0.secure ? "wss" : "ws")://\($0.hostHeader)" }
    }

    /// `GET /v1/hubs`: `{"hubs":["ws://…/v1/ws", …]}`.
    public var json: JSONValue {
        .object(["hubs": .array(urls.map(JSONValue.string))])
    }

    private var parsed: [WebSocketURL] { urls.compactMap { try? WebSocketURL($0) } }
}
