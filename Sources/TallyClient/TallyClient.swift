import Dispatch
import TallyNet
// The API speaks in JSONValue, JSONObject, ProtocolError and
// SubscriptionTarget: importing TallyClient brings them along.
@_exported import TallyProtocol
import TallyTLS

/// A connection to a Tally hub that stays up: it reconnects with
/// exponential backoff and full jitter, says hello with the token,
/// resubscribes every subscription with `since` = the last seq it saw (or
/// takes the snapshot a `resnapshot` answer brings), and only then reports
/// `.live` and sends the requests it held.
///
/// Given several hubs of one cluster (`init(urls:)`: hubs sharing one
/// PostgreSQL database give every change the same seq), it moves to the
/// next one in turn whenever its connection is lost or cannot be made, and
/// resumes there the same way: the backoff grows per round over the list.
///
/// Every callback (state, replies, subscription events, observations) runs
/// on one serial queue per client (`queue`), in the order things happened,
/// so handlers need no locks of their own. Every method may be called from
/// any thread.
///
/// ```swift
/// let client = try TallyClient(url: "ws://127.0.0.1:8080", token: token, clientName: "scanner-3")
/// client.onStateChange { state, reason in print(state, reason ?? "") }
/// let orders = client.observe(prefix: "orders/") { update in
///     for name in update.changes.inserted { print("new", name) }
/// }
/// client.connect()
/// let result = try await client.set("orders/42", path: "qty", value: 3, idem: "qty-42-3")
/// ```
public final class TallyClient: Sendable {
    /// How the client connects, waits and gives up.
    public struct Options: Sendable {
        /// Delays between reconnect attempts (250 ms doubling to 30 s, full jitter).
        public var backoff = Backoff()
        /// A sent request without a reply for this long marks the connection
        /// as stuck: it is dropped and reopened.
        public var requestTimeoutMillis: Int64 = 30_000
        /// How long a request waits for a live connection before failing
        /// with `timeout`.
        public var waitForConnectionMillis: Int64 = 30_000
        /// Ping after this much silence; give the connection up after
        /// `idleTimeoutMillis` without anything from the hub.
        public var pingIntervalMillis: Int64 = 5_000
        public var idleTimeoutMillis: Int64 = 15_000
        /// The TCP connect + WebSocket handshake must finish within this.
        public var connectTimeoutMillis: Int64 = 10_000
        public var maxMessageSize = 256 << 20
        public var maxOutboundBytes = 64 << 20
        /// Wait the hello's `retryAfterMs` (sent by a hub that just started)
        /// before resubscribing with a resume point.
        public var honourRetryAfter = true
        /// A connection that stayed up this long resets the backoff.
        public var stableMillis: Int64 = 10_000
        /// For wss:// URLs (default: the system's trust store).
        public var tls: TLSContext?
        /// Extra hello members, asked for at each connect (e.g. `outbox`).
        public var helloExtras: (@Sendable () -> JSONObject)?
        /// The event loop to run the socket on (default: a loop of the client's own).
        public var loop: EventLoop?
        /// Reconnect after a lost connection (the default). When false the
        /// first loss is final: what waits fails with `disconnected`, the
        /// state becomes `.offline` with the reason (one-shot commands).
        public var reconnects = true
        /// Say `hello` at each connect even without a token (the default).
        /// When false and there is no token, the client goes straight to
        /// resubscribing, as a hub in open mode allows.
        public var sendsHelloWithoutToken = true
        /// Every push (change, query, event) as it came, on the queue, before
        /// it is routed to subscriptions: for callers that subscribe with
        /// raw `send` messages (`tally watch`).
        public var onPush: (@Sendable (JSONObject) -> Void)?

        public init() {}
    }

    let core: ClientCore

    /// The serial queue every callback runs on.
    public var queue: DispatchQueue { core.queue }
    /// The hub connected to, or the one the current (or next) attempt is for.
    public var url: String { core.sync { core.url } }
    /// Every hub the client knows, in the order it goes round them.
    public var urls: [String] { core.urls }

    /// Prepares a client; nothing happens on the network until `connect()`.
    /// - Parameters:
    ///   - url: `ws://host:port/v1/ws` or `wss://…` (an http(s) URL or one
    ///     without a path is adjusted the way the CLI does).
    ///   - token: the bearer token of a hub that requires one; sent in the hello.
    ///   - clientName: shown in the hub's logs and `/v1/admin/clients`.
    public convenience init(url: String, token: String? = nil, clientName: String = "tally-swift",
                            options: Options = Options()) throws(ProtocolError) {
        try self.init(urls: [url], token: token, clientName: clientName, options: options)
    }

    /// Prepares a client for several hubs of one cluster; it connects to
    /// the first, and after a lost connection to the next in turn.
    /// - Parameters:
    ///   - urls: one URL or more, each as `init(url:)` takes it.
    public init(urls: [String], token: String? = nil, clientName: String = "tally-swift",
                options: Options = Options()) throws(ProtocolError) {
        guard !urls.isEmpty else { throw ProtocolError.badField("urls", "give at least one hub URL") }
        var resolved: [String] = []
        for url in urls {
            let normalized = Self.normalize(url)
            do { _ = try WebSocketURL(normalized) } catch {
                throw ProtocolError.badField("url", "'\(url)' is not a ws:// or wss:// URL: \(error)")
            }
            resolved.append(normalized)
        }
        let loop: EventLoop
        var group: EventLoopGroup?
        if let given = options.loop {
            loop = given
        } else {
            do { group = try EventLoopGroup(threads: 1) } catch {
                throw ProtocolError(.storageFailed, "cannot start the client's event loop: \(error)")
            }
            loop = group!.next()
        }
        core = ClientCore(urls: resolved, token: token, clientName: clientName, options: options,
                          loop: loop, ownedGroup: group)
    }

    deinit {
        let core = self.core
        core.queue.async { core.close() }
    }

    /// ws:// for http://, wss:// for https://, `/v1/ws` when there is no path.
    public static func normalize(_ url: String) -> String {
        WebSocketURL.hubEndpoint(url)
    }

    // MARK: Lifecycle

    /// Called on the client's queue with every state change and, for
    /// `.reconnecting`, why the connection was lost.
    public func onStateChange(_ handler: @escaping @Sendable (ConnectionState, String?) -> Void) {
        let core = self.core
        core.queue.async { core.stateHandler = handler }
    }

    /// Called on the client's queue as a resync goes (see `SyncProgress`).
    public func onSyncProgress(_ handler: @escaping @Sendable (SyncProgress) -> Void) {
        let core = self.core
        core.queue.async { core.progressHandler = handler }
    }

    /// Starts connecting (and keeps reconnecting until `close()`).
    public func connect() {
        let core = self.core
        core.queue.async { core.connect() }
    }

    /// Closes the connection for good: pending requests fail with `client_closed`.
    public func close() {
        let core = self.core
        core.queue.async { core.close() }
    }

    /// Closes and waits until the client's own event loop has stopped. Call
    /// it before the process exits: a loop thread still encrypting or
    /// masking a frame would race the C libraries' exit handlers. Not from
    /// the client's queue.
    public func shutdown() {
        let core = self.core
        core.queue.sync { core.close(stopLoop: false) }
        core.ownedGroup?.shutdown()
    }

    /// The current state (a snapshot: it may change right after).
    public var state: ConnectionState { core.sync { core.state } }

    /// Why the last connection was lost, if it was.
    public var lastError: String? { core.sync { core.lastError } }

    /// The last hello reply (`seq`, `floor`, `user`, `role`, `retryAfterMs`…).
    public var hello: JSONObject? { core.sync { core.helloReply } }

    // MARK: Requests

    /// Sends any protocol message (without `id`, which the client assigns).
    /// `completion` runs on the queue with the reply or the error: the hub's
    /// refusal, or `disconnected` / `timeout` / `client_closed`.
    public func send(_ message: JSONObject,
                     completion: @escaping @Sendable (Result<JSONObject, ProtocolError>) -> Void) {
        let core = self.core
        core.queue.async { core.submit(message, completion) }
    }

    /// Sends only on a live connection; otherwise fails at once with
    /// `disconnected` instead of waiting. For callers that keep their own
    /// queue of work and resend it after the next `.live` (an outbox).
    public func sendIfLive(_ message: JSONObject,
                           completion: @escaping @Sendable (Result<JSONObject, ProtocolError>) -> Void) {
        let core = self.core
        core.queue.async {
            guard core.phase == .live else {
                return completion(.failure(ProtocolError(.disconnected, "not connected to the hub")))
            }
            core.transmit(message, completion)
        }
    }

    /// `send` for async code.
    public func request(_ message: JSONObject) async throws(ProtocolError) -> JSONObject {
        let result: Result<JSONObject, ProtocolError> = await withCheckedContinuation { continuation in
            send(message) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Tells the hub this client's sync health (`report`): writes waiting in
    /// its outbox and the last seq it applied. Dropped when not live.
    public func report(outbox: Int64?, seq: Int64?) {
        var message: JSONObject = ["op": "report"]
        if let outbox { message["outbox"] = .int(outbox) }
        if let seq { message["seq"] = .int(seq) }
        let (core, report) = (self.core, message)
        core.queue.async { if core.phase == .live { core.fireAndForget(report) } }
    }

    // MARK: Subscriptions

    /// Subscribes to a record, a path, a list, a prefix or a topic. The
    /// subscription is remembered: after a reconnect it is sent again with
    /// `since` = the last seq it saw, so `handler` gets exactly the changes
    /// it missed (or a snapshot with `resnapshot: true`).
    ///
    /// - Parameters:
    ///   - since: resume from this seq (e.g. one a store kept across runs);
    ///     nil starts with a snapshot.
    ///   - handler: runs on the queue. If it throws, the client drops the
    ///     connection and delivers again from the last point it accepted.
    public func subscribe(_ target: SubscriptionTarget, since: Int64? = nil,
                          handler: @escaping @Sendable (SubscriptionEvent) throws -> Void) -> Subscription {
        let core = self.core
        let id = core.sync { core.subscribe(target, since: since, handler: handler) }
        return Subscription(id: id, target: target, core: core)
    }

    /// The seq a subscription has seen everything up to (its next resume point).
    public func cursor(of subscription: Subscription) -> Int64? {
        let core = self.core
        return core.sync { core.subscriptions[subscription.id]?.cursor }
    }
}
