import Dispatch
import TallyConcurrency
import TallyNet
import TallyProtocol

/// A blocking face over `TallyClient` for one-shot commands (`tally get`,
/// `verify`, the intake stages): connect once — to the first hub of the
/// list that can be reached — one request at a time, pushes kept in order
/// for `nextPush`. It does not reconnect: a lost connection is an error the
/// caller sees, and a command that wants to go on (`tally watch`, a
/// request that is safe to repeat: `onFirstReachable`) makes a new one.
///
/// With a token it says `hello` first, so a bad token fails here, before
/// any command runs; without one it sends no hello (open mode).
public final class BlockingTallyClient: Sendable {
    /// The hub this client is connected to.
    public let url: String
    /// Where `url` is in the access's list: the hub to try after a lost
    /// connection is the next one.
    public let hubIndex: Int
    /// The hubs of the list before `url` that could not be reached, with why.
    public let passedOver: [HubError]
    /// Who the hub's `hello` said this connection acts as (with a token);
    /// nil without one: an open hub then acts as "anonymous".
    public let user: String?
    private let client: TallyClient
    private let events: Mailbox

    /// Replies carry records of up to the hub's record limit inside an
    /// envelope, so they may exceed the limits for one client message.
    public static let replyLimits = JSONLimits(maxDepth: 64, maxBytes: 64 << 20, maxStringBytes: 16 << 20,
                                               maxArrayElements: 1_000_000, maxObjectMembers: 1_000_000)

    /// Connects to the first of the access's hubs that can be reached, each
    /// within `connectTimeoutMillis`: a hub that refuses the connection, does
    /// not answer in time or fails the handshake gives way to the next one.
    /// `unreachable` (`noneReachable` for a list) when none can be; the
    /// hub's refusal when it refuses the token; `insecureToken` before any
    /// connection when the token would go in clear text to any of them.
    public init(access: HubAccess, clientName: String = "tally-cli", connectTimeoutMillis: Int = 5000) throws(HubError) {
        try access.checkTransports()
        var failures: [HubError] = []
        var connection: (client: TallyClient, events: Mailbox, url: String, index: Int, user: String?)?
        for (index, url) in access.urls.enumerated() {
            do {
                let (client, events, user) = try Self.connect(url, token: access.token, clientName: clientName,
                                                              connectTimeoutMillis: connectTimeoutMillis)
                connection = (client, events, url, index, user)
                break
            } catch .unreachable(let url, let reason) {
                failures.append(.unreachable(url: url, reason: reason))
            }
        }
        guard let connection else { throw failures.count == 1 ? failures[0] : .noneReachable(failures) }
        (client, events, url, hubIndex) = (connection.client, connection.events, connection.url, connection.index)
        user = connection.user
        passedOver = failures
    }

    /// One connection to `url`: live, with the token said in hello.
    private static func connect(_ url: String, token: String?, clientName: String,
                                connectTimeoutMillis: Int) throws(HubError) -> (TallyClient, Mailbox, String?) {
        var options = TallyClient.Options()
        options.reconnects = false
        options.sendsHelloWithoutToken = false
        options.maxMessageSize = 64 << 20
        options.connectTimeoutMillis = Int64(connectTimeoutMillis)
        // Replies are waited for here, with their own timeout.
        options.requestTimeoutMillis = 24 * 3_600_000
        // The WebSocket defaults of a plain connection: a quiet hub is fine.
        options.pingIntervalMillis = 30_000
        options.idleTimeoutMillis = 75_000
        let events = Mailbox()
        options.onPush = { events.post(.push($0)) }
        let client: TallyClient
        do {
            client = try TallyClient(url: url, token: nil, clientName: clientName, options: options)
        } catch {
            throw .unreachable(url: url, reason: error.message)
        }
        let connected = DispatchSemaphore(value: 0)
        let outcome = LockedValueBox<String??>(nil)
        client.onStateChange { state, reason in
            switch state {
            case .live:
                outcome.withLock { if $0 == nil { $0 = .some(nil) } }
                connected.signal()
            case .offline:
                let reason = reason ?? "the connection closed"
                let first = outcome.withLock { current -> Bool in
                    guard current == nil else { return false }
                    current = .some(reason)
                    return true
                }
                if first { connected.signal() } else { events.post(.lost(reason)) }
            case .connecting, .reconnecting:
                break
            }
        }
        client.connect()
        // The connect timeout closes the attempt; the margin covers the close.
        if connected.wait(timeout: .now() + .milliseconds(connectTimeoutMillis * 2 + 1000)) == .timedOut {
            client.shutdown()
            throw .unreachable(url: url, reason: "WebSocket handshake failed: no answer within \(connectTimeoutMillis) ms")
        }
        if case .some(.some(let reason)) = outcome.withLock({ $0 }) {
            client.shutdown()
            throw .unreachable(url: url, reason: reason)
        }
        var user: String?
        if let token {
            do {
                let reply = try request(["op": "hello", "protocol": 1, "client": .string(clientName), "token": .string(token)],
                                        on: client, timeoutMillis: 30_000)
                user = reply["user"]?.stringValue
            } catch {
                client.shutdown()
                throw error
            }
        }
        return (client, events, user)
    }

    /// Sends `message` (the client adds its `id`) and waits for the reply,
    /// `ok` and `id` included; the hub's refusal throws `.refused`.
    public func request(_ message: JSONObject, timeoutMillis: Int = 30_000) throws(HubError) -> JSONObject {
        try Self.request(message, on: client, timeoutMillis: timeoutMillis)
    }

    private static func request(_ message: JSONObject, on client: TallyClient,
                                timeoutMillis: Int) throws(HubError) -> JSONObject {
        let done = DispatchSemaphore(value: 0)
        let result = LockedValueBox<Result<JSONObject, ProtocolError>?>(nil)
        client.send(message) { reply in
            result.withLock { $0 = reply }
            done.signal()
        }
        if done.wait(timeout: .now() + .milliseconds(timeoutMillis)) == .timedOut { throw .timeout }
        switch result.withLock({ $0 }) {
        case .success(let reply)?:
            return reply
        case .failure(let error)?:
            switch error.code {
            case .disconnected, .clientClosed:
                // The loss's own words, as a plain connection would say them.
                throw .disconnected(client.lastError ?? error.message)
            default:
                throw .refused(Self.object(error))
            }
        case nil:
            throw .timeout
        }
    }

    /// A list with every entry: its `get` reply, with the entries of the
    /// following pages appended (a reply carries at most 10,000; PROTOCOL.md,
    /// "get") and the paging members removed.
    public func wholeList(_ name: String) throws(HubError) -> JSONObject {
        var reply = try request(["op": "get", "list": .string(name)])
        var entries = reply["entries"]?.arrayValue ?? []
        var page = reply
        while page["more"] == .bool(true), let cursor = page["cursor"] {
            page = try request(["op": "get", "list": .string(name), "cursor": cursor])
            entries += page["entries"]?.arrayValue ?? []
            (reply["version"], reply["seq"]) = (page["version"], page["seq"])
        }
        reply["entries"] = .array(entries)
        (reply["more"], reply["cursor"], reply["count"]) = (nil, nil, nil)
        return reply
    }

    /// Every record a `get` of many asks for (a prefix or a live query), a
    /// page of at most 1,000 at a time in name order (`limit`, then
    /// `after` the last one: PROTOCOL.md, "get"), each page handed to
    /// `page` as it arrives.
    public func forEachPage(_ message: JSONObject, _ page: ([JSONObject]) throws -> Void) throws {
        var message = message
        message["limit"] = 1000
        while true {
            let reply = try request(message)
            let records = (reply["records"]?.arrayValue ?? []).compactMap(\.objectValue)
            try page(records)
            guard reply["more"] == .bool(true), let last = records.last?["name"]?.stringValue else { return }
            message["after"] = .string(last)
        }
    }

    /// The next push (change, query or event), in the order the hub sent
    /// them; nil when `timeoutMillis` passes; `.disconnected` once the
    /// connection is gone and every push before that was taken.
    public func nextPush(timeoutMillis: Int) throws(HubError) -> JSONObject? {
        switch events.take(timeoutMillis: timeoutMillis) {
        case nil: return nil
        case .push(let object)?: return object
        case .lost(let reason)?: throw .disconnected(reason)
        }
    }

    /// Closes the connection and stops the client's event loop.
    public func close() { client.shutdown() }

    static func object(_ error: ProtocolError) -> JSONObject {
        error.json.objectValue ?? [:]
    }

    enum Event: Sendable {
        case push(JSONObject)
        case lost(String)
    }

    /// Pushes and the loss, from the client's queue to the waiting thread.
    final class Mailbox: Sendable {
        private let queue = LockedValueBox<(events: [Event], lost: String?)>(([], nil))
        private let arrived = DispatchSemaphore(value: 0)

        func post(_ event: Event) {
            let added = queue.withLock { state -> Bool in
                if case .lost(let reason) = event {
                    guard state.lost == nil else { return false }
                    state.lost = reason
                }
                state.events.append(event)
                return true
            }
            if added { arrived.signal() }
        }

        func take(timeoutMillis: Int) -> Event? {
            if arrived.wait(timeout: .now() + .milliseconds(timeoutMillis)) == .timedOut { return nil }
            return queue.withLock { state -> Event? in
                guard let first = state.events.first else { return nil }
                // The loss stays, so every later call sees it too.
                if case .lost = first {
                    arrived.signal()
                    return first
                }
                state.events.removeFirst()
                return first
            }
        }
    }
}
