import Dispatch
@preconcurrency import Glibc
import TallyNet
import TallyProtocol
import TallyWebSocket

/// Everything a `TallyClient` knows, confined to its serial queue: the
/// connection and its phase, requests in flight and waiting, the
/// subscriptions with their resume points.
///
/// `@unchecked Sendable` because every member is touched only on `queue`:
/// the facade hops there with `queue.async`, the loop thread reaches it
/// only through the `Inbox`, and timers are `queue.asyncAfter`. A
/// generation number guards against late news from a connection that has
/// already been replaced.
final class ClientCore: @unchecked Sendable {
    enum Phase { case idle, connecting, hello, syncing, live, waiting, closed }

    struct Pending {
        var message: JSONObject
        var deadline: Int64
        var completion: @Sendable (Result<JSONObject, ProtocolError>) -> Void
    }

    let queue: DispatchQueue
    /// The hubs, in the order the client goes round them.
    let urls: [String]
    /// Which of `urls` the current (or next) attempt is for.
    var hubIndex = 0
    var url: String { urls[hubIndex] }
    let token: String?
    let clientName: String
    let options: TallyClient.Options
    let loop: EventLoop
    /// The loop group the client started for itself (nil when given a loop).
    let ownedGroup: EventLoopGroup?
    static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    var stateHandler: (@Sendable (ConnectionState, String?) -> Void)?
    var progressHandler: (@Sendable (SyncProgress) -> Void)?
    var phase: Phase = .idle
    var state: ConnectionState = .offline
    var lastError: String?
    /// Bumped whenever the connection is replaced or dropped.
    var generation = 0
    var socket: SocketBox?
    var attempt = 0
    var liveSince: Int64?
    var nextID: Int64 = 1
    var inflight: [Int64: Pending] = [:]
    var waiting: [Pending] = []
    var subscriptions: [Int: SubscriptionState] = [:]
    var nextSubscriptionID = 1
    /// The highest seq pushed on the current connection.
    var lastPushSeq: Int64 = 0
    var helloReply: JSONObject?
    var ticking = false
    var generator = SystemRandomNumberGenerator()

    /// Replies carry whole records (up to the hub's record limit) and a
    /// resume may carry up to 200,000 changes, so the limits are far wider
    /// than those for one client message.
    static let replyLimits = JSONLimits(maxDepth: 64, maxBytes: 1 << 30, maxStringBytes: 16 << 20,
                                        maxArrayElements: 10_000_000, maxObjectMembers: 1_000_000)

    init(urls: [String], token: String?, clientName: String, options: TallyClient.Options,
         loop: EventLoop, ownedGroup: EventLoopGroup?) {
        self.urls = urls
        self.token = token
        self.clientName = clientName
        self.options = options
        self.loop = loop
        self.ownedGroup = ownedGroup
        queue = DispatchQueue(label: "tally.client")
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(queue))
    }

    var onQueue: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(queue) }

    /// Runs `body` on the queue and returns its result, also when called on it.
    func sync<R>(_ body: () -> R) -> R {
        onQueue ? body() : queue.sync(execute: body)
    }

    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    func emit(_ newState: ConnectionState, _ reason: String?) {
        state = newState
        stateHandler?(newState, reason)
    }

    // MARK: Connecting

    func connect() {
        guard phase == .idle else { return }
        startTicking()
        startAttempt()
    }

    func startAttempt() {
        generation += 1
        lastPushSeq = 0
        let generation = self.generation
        phase = .connecting
        emit(.connecting, nil)
        let inbox = Inbox(queue: queue) { [weak self] items in self?.received(items, generation: generation) }
        var ws = WebSocketOptions()
        ws.maxMessageSize = options.maxMessageSize
        ws.pingIntervalMillis = options.pingIntervalMillis
        ws.idleTimeoutMillis = options.idleTimeoutMillis
        // The handshake may take twice the close timeout (ConnectionStateMachine).
        ws.closeTimeoutMillis = max(500, options.connectTimeoutMillis / 2)
        ws.maxOutboundBytes = options.maxOutboundBytes
        let (url, loop, tls, queue, socketOptions, core) = (self.url, self.loop, options.tls, self.queue, ws, self)
        // Name resolution blocks: keep it off the client's queue. (The
        // attempt holds the core until it ends, within the connect timeout.)
        DispatchQueue.global().async {
            WebSocketClient.connect(to: url, on: loop, options: socketOptions, tls: tls,
                                    handler: { _ in SocketBridge(inbox: inbox) }) { result in
                let boxed = result.map { SocketBox(socket: $0) }
                queue.async { core.opened(boxed, generation: generation) }
            }
        }
    }

    func opened(_ result: Result<SocketBox, ClientError>, generation: Int) {
        guard generation == self.generation, phase == .connecting else {
            if case .success(let box) = result { box.close() }
            return
        }
        switch result {
        case .failure(let error):
            lost("\(error)")
        case .success(let box):
            socket = box
            phase = .hello
            if token == nil, !options.sendsHelloWithoutToken {
                return greeted(.success([:]), generation: generation)
            }
            var hello: JSONObject = ["op": "hello", "protocol": 1, "client": .string(clientName)]
            if let token { hello["token"] = .string(token) }
            if let extras = options.helloExtras?() {
                for (key, value) in extras where hello[key] == nil { hello[key] = value }
            }
            transmit(hello) { [weak self] result in self?.greeted(result, generation: generation) }
        }
    }

    func greeted(_ result: Result<JSONObject, ProtocolError>, generation: Int) {
        guard generation == self.generation, phase == .hello else { return }
        switch result {
        case .failure(let error):
            // The client's own failures have ended the connection already; the
            // hub's "not now" (its database out of reach…) ends it here, so
            // the next attempt (the next hub) follows.
            if error.isTransient, error.code != .unauthorized, !error.isHubRetryable { return }
            lost(error.code == .unauthorized ? "the hub refused the token: \(error.message)" : "hello refused: \(error)")
        case .success(let reply):
            helloReply = reply
            liveSince = Self.now()
            phase = .syncing
            // A restarted hub spreads the resyncs of reconnecting clients.
            let wait = reply["retryAfterMs"]?.int64 ?? 0
            let resyncing = subscriptions.values.contains { $0.cursor != nil }
            if wait > 0, options.honourRetryAfter, resyncing {
                progressHandler?(.waiting(delayMs: Int(min(wait, 60_000))))
                queue.asyncAfter(deadline: .now() + .milliseconds(Int(min(wait, 60_000)))) { [weak self] in
                    guard let self, self.generation == generation, self.phase == .syncing else { return }
                    self.resubscribeAll()
                }
            } else {
                resubscribeAll()
            }
        }
    }

    func resubscribeAll() {
        if subscriptions.values.contains(where: { !$0.target.isTopic }) { progressHandler?(.subscribing) }
        for sub in subscriptions.values.sorted(by: { $0.id < $1.id }) { sendSubscribe(sub) }
        checkSynced()
    }

    /// Live once every subscription has caught up; requests held meanwhile go out in order.
    func checkSynced() {
        guard phase == .syncing, subscriptions.values.allSatisfy({ $0.status == .ready }) else { return }
        phase = .live
        emit(.live, nil)
        let held = waiting
        waiting = []
        for pending in held { transmit(pending.message, pending.completion) }
    }

    /// The connection is gone (or never came): fail what was in flight and
    /// schedule the next attempt.
    func lost(_ reason: String) {
        guard phase == .connecting || phase == .hello || phase == .syncing || phase == .live else { return }
        generation += 1
        socket?.close()
        socket = nil
        phase = .waiting
        lastError = reason
        for sub in subscriptions.values { sub.reset() }
        if let since = liveSince, Self.now() - since >= options.stableMillis { attempt = 0 }
        liveSince = nil
        attempt += 1
        // The next hub of the list (round and round); the backoff grows per
        // round over the list, so a dead hub costs no more than one attempt
        // before its live neighbour is tried.
        hubIndex = (hubIndex + 1) % urls.count
        let round = (attempt - 1) / urls.count + 1
        let delay = options.backoff.delay(attempt: round, using: &generator)
        let failed = inflight.sorted { $0.key < $1.key }
        inflight = [:]
        let error = ProtocolError(.disconnected, "the connection to the hub was lost before the reply (\(reason))")
        for (_, pending) in failed { pending.completion(.failure(error)) }
        guard options.reconnects else {
            // One-shot: the first loss is the end.
            phase = .closed
            let held = waiting
            waiting = []
            let gone = ProtocolError(.disconnected, reason)
            for pending in held { pending.completion(.failure(gone)) }
            return emit(.offline, reason)
        }
        emit(.reconnecting(attempt: attempt, delayMs: delay), reason)
        let generation = self.generation
        queue.asyncAfter(deadline: .now() + .milliseconds(delay)) { [weak self] in
            guard let self, self.phase == .waiting, self.generation == generation else { return }
            self.startAttempt()
        }
    }

    func close(stopLoop: Bool = true) {
        guard phase != .closed else { return }
        generation += 1
        socket?.close()
        socket = nil
        phase = .closed
        let error = ProtocolError(.clientClosed, "the client was closed")
        let failed = inflight.sorted { $0.key < $1.key }.map(\.value) + waiting
        inflight = [:]
        waiting = []
        subscriptions = [:]
        for pending in failed { pending.completion(.failure(error)) }
        emit(.offline, nil)
        if stopLoop, let group = ownedGroup {
            // Let the close frame go out before the loop stops.
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) { group.shutdown() }
        }
    }

    // MARK: Requests

    /// A caller's request: sent now when live, else held until live (or
    /// failed after `waitForConnectionMillis`).
    func submit(_ message: JSONObject, _ completion: @escaping @Sendable (Result<JSONObject, ProtocolError>) -> Void) {
        switch phase {
        case .closed:
            completion(.failure(ProtocolError(.clientClosed, "the client was closed")))
        case .live:
            transmit(message, completion)
        case .idle, .connecting, .hello, .syncing, .waiting:
            startTicking()
            waiting.append(Pending(message: message, deadline: Self.now() + options.waitForConnectionMillis,
                                   completion: completion))
        }
    }

    /// Sends now on the current connection with a fresh id.
    func transmit(_ message: JSONObject, _ completion: @escaping @Sendable (Result<JSONObject, ProtocolError>) -> Void) {
        guard let socket else {
            return completion(.failure(ProtocolError(.disconnected, "not connected to the hub")))
        }
        let id = nextID
        nextID += 1
        var message = message
        message["id"] = .int(id)
        inflight[id] = Pending(message: message, deadline: Self.now() + options.requestTimeoutMillis, completion: completion)
        socket.send(JSONValue.object(message).serialized())
    }

    /// Sends a message whose answer nobody waits for (report, unsubscribe).
    func fireAndForget(_ message: JSONObject) {
        guard phase == .live || phase == .syncing else { return }
        transmit(message) { _ in }
    }

    func startTicking() {
        guard !ticking else { return }
        ticking = true
        tick()
    }

    /// Four times a second: a request without a reply for too long means
    /// the connection is stuck (a black-holed route never errors by itself);
    /// held requests that waited too long fail with `timeout`.
    func tick() {
        guard phase != .closed else { ticking = false; return }
        let now = Self.now()
        if inflight.values.contains(where: { $0.deadline < now }) {
            lost("no reply within \(options.requestTimeoutMillis) ms")
        }
        if waiting.contains(where: { $0.deadline < now }) {
            let expired = waiting.filter { $0.deadline < now }
            waiting.removeAll { $0.deadline < now }
            let error = ProtocolError(.timeout, "no live connection to the hub within \(options.waitForConnectionMillis) ms")
            for pending in expired { pending.completion(.failure(error)) }
        }
        queue.asyncAfter(deadline: .now() + .milliseconds(250)) { [weak self] in self?.tick() }
    }

    // MARK: Receiving

    func received(_ items: [InboxItem], generation: Int) {
        guard generation == self.generation, socket != nil else { return }
        var pushes: [JSONObject] = []
        for item in items {
            switch item {
            case .message(let bytes):
                guard case .object(let object)? = try? JSONValue.parse(bytes, limits: Self.replyLimits) else {
                    deliver(pushes)
                    lost("the hub sent something that is not a JSON object")
                    return
                }
                if object["op"] != nil {
                    options.onPush?(object)
                    pushes.append(object)
                    continue
                }
                if !pushes.isEmpty {
                    deliver(pushes)
                    pushes = []
                    guard generation == self.generation else { return }
                }
                reply(object)
                guard generation == self.generation else { return }
            case .closed(let code, let reason):
                if !pushes.isEmpty { deliver(pushes) }
                guard generation == self.generation else { return }
                lost("the hub closed the connection (\(code.rawValue)\(reason.isEmpty ? "" : ": \(reason)"))")
                return
            }
        }
        if !pushes.isEmpty { deliver(pushes) }
    }

    func reply(_ object: JSONObject) {
        guard let id = object["id"]?.int64, let pending = inflight.removeValue(forKey: id) else { return }
        if object["ok"] == .bool(true) {
            pending.completion(.success(object))
        } else {
            pending.completion(.failure(ProtocolError(reply: object["error"]?.objectValue)))
        }
    }

    /// Routes pushes to the subscriptions they match, one batch per
    /// subscription, then moves every current subscription's resume point:
    /// pushes come in seq order, so after a push with seq N every change up
    /// to N that any of them matches has been delivered.
    func deliver(_ pushes: [JSONObject]) {
        guard !pushes.isEmpty else { return }
        let subs = subscriptions.values.sorted { $0.id < $1.id }
        var batches: [Int: [Change]] = [:]
        var highest = lastPushSeq
        for push in pushes {
            switch push["op"]?.stringValue {
            case "change":
                guard let change = Change(push: push) else { continue }
                highest = max(highest, change.seq)
                for sub in subs where sub.target.matches(change) {
                    switch sub.status {
                    case .ready: batches[sub.id, default: []].append(change)
                    case .paging where sub.listPages != nil: sub.listPages?.apply(change)
                    case .paging: sub.buffer.append(change)
                    case .inactive, .awaitingReply: break
                    }
                }
            case "query":
                guard let seq = push["seq"]?.int64, let queryID = push["query"]?.int64 else { continue }
                highest = max(highest, seq)
                let change = QueryChange(seq: seq, json: push)
                for sub in subs where sub.queryID == queryID {
                    switch sub.status {
                    case .ready: guard dispatch(sub, .queryChange(change)) else { return }
                    case .paging: sub.queryBuffer.append(change)
                    case .inactive, .awaitingReply: break
                    }
                }
            case "event":
                guard let topic = push["topic"]?.stringValue else { continue }
                for sub in subs where sub.status == .ready {
                    guard case .topic(let name) = sub.target, name.sameBytes(as: topic) else { continue }
                    try? sub.handler(.event(topic: topic, data: push["data"] ?? .null))
                }
            default:
                continue
            }
        }
        for sub in subs {
            guard let changes = batches[sub.id], subscriptions[sub.id] != nil else { continue }
            guard dispatch(sub, .changes(changes, through: highest)) else { return }
        }
        lastPushSeq = highest
        for sub in subs where sub.status == .ready && !sub.target.isTopic {
            sub.cursor = max(sub.cursor ?? 0, highest)
        }
    }

    /// Hands an event to a subscription's handler; a handler that throws
    /// (it could not take the event, e.g. its store is full) drops the
    /// connection so the event comes again after the reconnect.
    func dispatch(_ sub: SubscriptionState, _ event: SubscriptionEvent) -> Bool {
        do {
            try sub.handler(event)
            return true
        } catch {
            lost("a subscription handler (\(sub.target.key)) could not take an event: \(error)")
            return false
        }
    }
}

/// One subscription: its target, handler and resume point. Queue-confined
/// like the core that owns it.
final class SubscriptionState {
    enum Status { case inactive, awaitingReply, paging, ready }

    let id: Int
    let target: SubscriptionTarget
    let handler: @Sendable (SubscriptionEvent) throws -> Void
    /// The subscription has seen every matching change up to this seq (nil:
    /// nothing yet, so the next subscribe asks for a snapshot).
    var cursor: Int64?
    var status: Status = .inactive
    /// While paging a large prefix: the first reply, the records so far,
    /// and the pushes that arrived meanwhile.
    var snapshot: Snapshot?
    var pages: [String: RecordEnvelope] = [:]
    var buffer: [Change] = []
    /// A query subscription: the hub's id for it (its pushes carry it), and
    /// the query pushes that arrived while its result was paged.
    var queryID: Int64?
    var queryBuffer: [QueryChange] = []
    /// While paging a long list: the entries so far, with the pushes that
    /// arrived meanwhile applied to them.
    var listPages: ListPages?

    init(id: Int, target: SubscriptionTarget, cursor: Int64?, handler: @escaping @Sendable (SubscriptionEvent) throws -> Void) {
        self.id = id
        self.target = target
        self.cursor = cursor
        self.handler = handler
    }

    func reset() {
        status = .inactive
        snapshot = nil
        pages = [:]
        buffer = []
        queryBuffer = []
        listPages = nil
    }
}

/// A long list being paged in (PROTOCOL.md, "Paging a list"): the entries
/// loaded so far and the cursor of the next page (nil: nothing more to
/// load). A push is applied when it touches the loaded part and left to
/// the pages to come otherwise: the hub answers a connection in order, so
/// each page starts where the pushes before it left the list. An entry
/// added right after the loaded ones is in the next page while the cursor's
/// entry (the last loaded) is there; once that entry was removed nobody can
/// tell, and the paging starts again from the first page (`restart`).
struct ListPages {
    var list: ListEnvelope?
    var cursor: String?
    /// The seq of the last push applied.
    var seq: Int64
    var cursorGone = false
    var restart = false

    mutating func apply(_ change: Change) {
        guard change.seq > seq, var list else { return }
        seq = change.seq
        let loaded = list.entries.count
        switch change.kind {
        case .addEntry:
            guard let entry = change.json["entry"]?.stringValue, let index = change.json["index"]?.int64.map({ Int($0) }) else { break }
            if cursor != nil, cursorGone, index == loaded { restart = true }
            guard index < loaded || (index == loaded && cursor == nil) else { break }
            list.entries.insert(entry, at: min(max(0, index), loaded))
        case .removeEntry:
            let indexes = (change.json["indexes"]?.arrayValue ?? []).compactMap { $0.int64.map { Int($0) } }
            if indexes.contains(loaded - 1) { cursorGone = true }
            for index in indexes.sorted(by: >) where index < loaded { list.entries.remove(at: index) }
        case .setEntries:
            list.entries = (change.json["entries"]?.arrayValue ?? []).compactMap(\.stringValue)
            cursor = nil
        default: // delete
            self.list = nil
            cursor = nil
            return
        }
        list.version = change.version
        list.seq = change.seq
        self.list = list
    }
}
