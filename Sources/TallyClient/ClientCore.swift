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
    let url: String
    let token: String?
    let clientName: String
    let options: TallyClient.Options
    let loop: EventLoop
    /// The loop group the client started for itself (nil when given a loop).
    let ownedGroup: EventLoopGroup?
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    var stateHandler: (@Sendable (ConnectionState, String?) -> Void)?
    private(set) var phase: Phase = .idle
    private(set) var state: ConnectionState = .offline
    private(set) var lastError: String?
    /// Bumped whenever the connection is replaced or dropped.
    private var generation = 0
    private var socket: SocketBox?
    private var attempt = 0
    private var liveSince: Int64?
    private var nextID: Int64 = 1
    private var inflight: [Int64: Pending] = [:]
    private var waiting: [Pending] = []
    var subscriptions: [Int: SubscriptionState] = [:]
    private var nextSubscriptionID = 1
    /// The highest seq pushed on the current connection.
    private var lastPushSeq: Int64 = 0
    private(set) var helloReply: JSONObject?
    private var ticking = false
    private var generator = SystemRandomNumberGenerator()

    /// Replies carry whole records (up to the hub's record limit) and a
    /// resume may carry up to 200,000 changes, so the limits are far wider
    /// than those for one client message.
    static let replyLimits = JSONLimits(maxDepth: 64, maxBytes: 1 << 30, maxStringBytes: 16 << 20,
                                        maxArrayElements: 10_000_000, maxObjectMembers: 1_000_000)

    init(url: String, token: String?, clientName: String, options: TallyClient.Options,
         loop: EventLoop, ownedGroup: EventLoopGroup?) {
        self.url = url
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

    private func emit(_ newState: ConnectionState, _ reason: String?) {
        state = newState
        stateHandler?(newState, reason)
    }

    // MARK: Connecting

    func connect() {
        guard phase == .idle else { return }
        startTicking()
        startAttempt()
    }

    private func startAttempt() {
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
        // The handshake may take twice the close timeout (Connection.sweep).
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

    private func opened(_ result: Result<SocketBox, ClientError>, generation: Int) {
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
            var hello: JSONObject = ["op": "hello", "protocol": 1, "client": .string(clientName)]
            if let token { hello["token"] = .string(token) }
            if let extras = options.helloExtras?() {
                for (key, value) in extras where hello[key] == nil { hello[key] = value }
            }
            transmit(hello) { [weak self] result in self?.greeted(result, generation: generation) }
        }
    }

    private func greeted(_ result: Result<JSONObject, ProtocolError>, generation: Int) {
        guard generation == self.generation, phase == .hello else { return }
        switch result {
        case .failure(let error):
            if error.isTransient, error.code != .unauthorized { return }
            lost(error.code == .unauthorized ? "the hub refused the token: \(error.message)" : "hello refused: \(error)")
        case .success(let reply):
            helloReply = reply
            liveSince = Self.now()
            phase = .syncing
            // A restarted hub spreads the resyncs of reconnecting clients.
            let wait = reply["retryAfterMs"]?.int64 ?? 0
            let resyncing = subscriptions.values.contains { $0.cursor != nil }
            if wait > 0, options.honourRetryAfter, resyncing {
                queue.asyncAfter(deadline: .now() + .milliseconds(Int(min(wait, 60_000)))) { [weak self] in
                    guard let self, self.generation == generation, self.phase == .syncing else { return }
                    self.resubscribeAll()
                }
            } else {
                resubscribeAll()
            }
        }
    }

    private func resubscribeAll() {
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
        let delay = options.backoff.delay(attempt: attempt, using: &generator)
        let failed = inflight.sorted { $0.key < $1.key }
        inflight = [:]
        let error = ProtocolError(.disconnected, "the connection to the hub was lost before the reply (\(reason))")
        for (_, pending) in failed { pending.completion(.failure(error)) }
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

    private func startTicking() {
        guard !ticking else { return }
        ticking = true
        tick()
    }

    /// Four times a second: a request without a reply for too long means
    /// the connection is stuck (a black-holed route never errors by itself);
    /// held requests that waited too long fail with `timeout`.
    private func tick() {
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

    private func received(_ items: [InboxItem], generation: Int) {
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

    private func reply(_ object: JSONObject) {
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
    private func deliver(_ pushes: [JSONObject]) {
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
                    case .paging: sub.buffer.append(change)
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

    // MARK: Subscriptions

    func subscribe(_ target: SubscriptionTarget, since: Int64?,
                   handler: @escaping @Sendable (SubscriptionEvent) throws -> Void) -> Int {
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        let sub = SubscriptionState(id: id, target: target, cursor: target.isTopic ? nil : since, handler: handler)
        subscriptions[id] = sub
        if phase == .syncing || phase == .live { sendSubscribe(sub) }
        return id
    }

    func cancel(subscription id: Int) {
        guard let sub = subscriptions.removeValue(forKey: id) else { return }
        if sub.status != .inactive {
            var message: JSONObject = ["op": "unsubscribe"]
            for (key, value) in sub.target.members { message[key] = value }
            fireAndForget(message)
        }
        checkSynced()
    }

    private func sendSubscribe(_ sub: SubscriptionState) {
        sub.reset()
        sub.status = .awaitingReply
        var message: JSONObject = ["op": "subscribe"]
        for (key, value) in sub.target.members { message[key] = value }
        if let cursor = sub.cursor { message["since"] = .int(cursor) }
        let (id, generation) = (sub.id, self.generation)
        transmit(message) { [weak self] result in self?.subscribed(id, result, generation: generation) }
    }

    private func subscribed(_ id: Int, _ result: Result<JSONObject, ProtocolError>, generation: Int) {
        guard generation == self.generation, let sub = subscriptions[id], sub.status == .awaitingReply else { return }
        let reply: JSONObject
        switch result {
        case .failure(let error):
            if error.isTransient { return }
            subscriptions[id] = nil
            try? sub.handler(.failed(error))
            checkSynced()
            return
        case .success(let object):
            reply = object
        }
        let seq = reply["seq"]?.int64 ?? lastPushSeq
        if sub.target.isTopic {
            sub.status = .ready
            return checkSynced()
        }
        if case .array(let items)? = reply["changes"] {
            let changes = items.compactMap { $0.objectValue.flatMap(Change.init(push:)) }
            guard dispatch(sub, .changes(changes, through: seq)) else { return }
            sub.cursor = max(seq, lastPushSeq)
            sub.status = .ready
            return checkSynced()
        }
        var snapshot = Snapshot(seq: seq, resnapshot: reply["resnapshot"] == .bool(true), records: [], list: nil,
                                reply: reply)
        if case .array(let records)? = reply["records"] {
            snapshot.records = records.compactMap { $0.objectValue.flatMap(RecordEnvelope.init(json:)) }
        } else if case .object(let record)? = reply["record"], let envelope = RecordEnvelope(json: record) {
            snapshot.records = [envelope]
        }
        if case .object(let list)? = reply["list"] { snapshot.list = ListEnvelope(json: list) }
        if case .prefix(let prefix) = sub.target, reply["more"] == .bool(true) {
            // Page the rest; pushes for the prefix wait in the buffer.
            sub.status = .paging
            sub.snapshot = snapshot
            for record in snapshot.records { sub.pages[record.name] = record }
            return fetchPage(sub, prefix: prefix, after: snapshot.records.last?.name)
        }
        finishSnapshot(sub, snapshot)
    }

    private func fetchPage(_ sub: SubscriptionState, prefix: String, after: String?) {
        var message: JSONObject = ["op": "get", "prefix": .string(prefix), "limit": 1000]
        if let after { message["after"] = .string(after) }
        let (id, generation) = (sub.id, self.generation)
        transmit(message) { [weak self] result in
            guard let self, generation == self.generation, let sub = self.subscriptions[id], sub.status == .paging else { return }
            switch result {
            case .failure(let error):
                if !error.isTransient { self.lost("cannot page \(prefix): \(error)") }
            case .success(let reply):
                let records = (reply["records"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RecordEnvelope.init(json:)) }
                // A page read after the snapshot may hold newer records: keep the newer one.
                for record in records where (sub.pages[record.name]?.seq ?? -1) < record.seq {
                    sub.pages[record.name] = record
                }
                if reply["more"] == .bool(true), let last = records.last {
                    self.fetchPage(sub, prefix: prefix, after: last.name)
                } else if var snapshot = sub.snapshot {
                    snapshot.records = sub.pages.values.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
                    self.finishSnapshot(sub, snapshot)
                }
            }
        }
    }

    /// Delivers a complete snapshot, then the pushes that arrived while it
    /// was paged (minus those the pages already reflect).
    private func finishSnapshot(_ sub: SubscriptionState, _ snapshot: Snapshot) {
        let pages = sub.pages
        let buffered = sub.buffer.filter { change in
            guard let held = pages[change.name], !change.isList else { return true }
            return change.seq > held.seq
        }
        sub.snapshot = nil
        sub.pages = [:]
        sub.buffer = []
        guard dispatch(sub, .snapshot(snapshot)) else { return }
        let through = max(snapshot.seq, lastPushSeq)
        if !buffered.isEmpty {
            guard dispatch(sub, .changes(buffered, through: through)) else { return }
        }
        sub.cursor = through
        sub.status = .ready
        checkSynced()
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
    }
}
