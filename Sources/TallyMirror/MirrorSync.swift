import Dispatch
@preconcurrency import Glibc
import TallyClient
import TallyProtocol

/// `tally mirror run`: keeps the store's records and lists current through
/// a `TallyClient` (resume from the stored seq, snapshot when there is
/// none), and replays the outbox whenever the connection is live.
///
/// Everything runs on the client's serial queue: subscription events are
/// applied to the store as they come (the handler returns only once its
/// transaction is committed, so the client's resume point never gets
/// ahead of the store), replies to outbox writes arrive there too.
///
/// Replay keeps up to `window` writes in flight, at most one per record so
/// a record's writes reach the hub in order. Each is sent with its base
/// version and idempotency key; `conflict` leads to a three-way merge
/// (`ThreeWayMerge`) whose writes replace the entry's (stored before they
/// are sent); an ok removes the entry — after the reply, in batches, so a
/// crash in between only resends writes the hub answers from its
/// idempotency record.
public final class MirrorSync: @unchecked Sendable {
    public struct Configuration: Sendable {
        /// The hubs of one cluster, in the order to go round them (one, usually).
        public var urls: [String]
        /// The first hub (setting it makes it the only one).
        public var url: String {
            get { urls[0] }
            set { urls = [newValue] }
        }
        /// How the hubs were named on the command line (stored for status
        /// and the next run); defaults to `urls`, comma-separated.
        public var serverLabel: String?
        public var token: String?
        /// Stable per mirror (`mirror:<host>:<store hash>`): shown on the hub.
        public var clientID: String
        /// `orders/` (a prefix, plus its workflow's list) or a name (that record and that list).
        public var patterns: [String]
        public var policies = PolicyTable()
        public var options = TallyClient.Options()
        /// `GET /v1/workflows`, run off the queue; nil when it failed.
        public var fetchWorkflows: (@Sendable () -> JSONValue?)?
        /// Resync progress (nil: none), called on the queue as it changes.
        public var progress: (@Sendable (ResyncState?) -> Void)?
        public var log: (@Sendable (String) -> Void)?
        /// The store failed for good; the engine has stopped.
        public var fatal: (@Sendable (String) -> Void)?
        /// Writes in flight at once.
        public var window = 64

        public init(url: String, token: String?, clientID: String, patterns: [String]) {
            self.init(urls: [url], token: token, clientID: clientID, patterns: patterns)
        }

        /// - Parameter urls: at least one.
        public init(urls: [String], token: String?, clientID: String, patterns: [String]) {
            self.urls = urls
            self.token = token
            self.clientID = clientID
            self.patterns = patterns
        }
    }

    let store: MirrorStore
    let configuration: Configuration
    public let client: TallyClient
    var queue: DispatchQueue { client.queue }
    var catalog: WorkflowCatalog
    var targets: [(target: SubscriptionTarget, subscription: Subscription)] = []
    var persistedCursors: [String: Int64] = [:]

    var live = false
    var stopped = false
    /// The outbox's replay: entries read from the store and not yet sent,
    /// those in flight, and the epoch a reply must carry to be current.
    var replay: OutboxReplay<OutboxEntry>
    /// Entries the hub confirmed, to remove in the next transaction.
    var completed: [(entry: OutboxEntry, result: WriteResult?)] = []
    var flushScheduled = false
    var lastDataVersion: Int64 = -1
    var lastPeriodic: Int64 = 0
    var lastReport: (outbox: Int64, seq: Int64?, at: Int64)?
    /// The watch on `conflicts/` (see MirrorSync+Conflicts).
    var conflictWatch: Subscription?
    /// Open conflicts the hub may have resolved, still to be looked at; the
    /// watch's resume point is stored only when none is left, so a run
    /// killed meanwhile sees the resolution again.
    var pendingResolutions: Set<String> = []
    var checkingResolutions: Set<String> = []
    var resyncTracker = ResyncTracker()
    /// The outbox entries waiting when the connection went live: the
    /// newest one's id, how many, how many are done.
    var replayBacklog: (maxID: Int64, total: Int, done: Int)?
    /// The number of the connection attempt under way.
    var connectAttempt = 1

    public init(store: MirrorStore, configuration: Configuration) throws(MirrorError) {
        self.store = store
        self.configuration = configuration
        replay = OutboxReplay(window: configuration.window)
        do { catalog = try store.workflows() } catch { throw .store(error) }
        var options = configuration.options
        options.helloExtras = { [store] in
            ["outbox": .int((try? store.outboxDepth()) ?? 0)]
        }
        do {
            client = try TallyClient(urls: configuration.urls, token: configuration.token,
                                     clientName: configuration.clientID, options: options)
        } catch {
            throw .refused(error)
        }
    }

    /// `mirror:<host>:<hash of the store's absolute path>`: the same mirror
    /// gets the same id on every run.
    public static func clientID(store path: String) -> String {
        var host = [CChar](repeating: 0, count: 256)
        gethostname(&host, host.count - 1)
        let hostname = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var absolute = path
        if let resolved = realpath(path, nil) {
            absolute = String(cString: resolved)
            free(resolved)
        }
        return "mirror:\(hostname):\(hashHex(absolute, digits: 12))"
    }

    /// The first `digits` hex digits of the text's 64-bit FNV-1a hash: a
    /// stable name derived from the text (not a secret).
    static func hashHex(_ text: String, digits: Int) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = Array("0123456789abcdef")
        return String((0..<min(digits, 16)).map { hex[Int((hash >> (60 - UInt64($0) * 4)) & 0xf)] })
    }

    // MARK: Lifecycle

    /// Records the run's settings, subscribes (resuming from the stored
    /// resume points) and connects.
    public func start() {
        queue.async { [self] in
            do {
                try begin()
            } catch {
                fail("cannot start the mirror: \(error)")
            }
        }
    }

    func begin() throws(MirrorStoreError) {
        var seen = Set<String>()
        var wanted: [SubscriptionTarget] = []
        for pattern in configuration.patterns {
            for target in MirrorTarget.targets(forPattern: pattern, catalog: catalog) where seen.insert(target.key).inserted {
                wanted.append(target)
            }
        }
        seen.insert(Self.conflictWatchKey)
        var cursors = try store.cursors()
        let hub = configuration.serverLabel ?? configuration.urls.joined(separator: ",")
        if let previous = try store.meta("hub"), !HubAccess.shareAHub(previous, hub), !cursors.isEmpty {
            // Resume points are seqs of one hub (or of the hubs of one
            // cluster, which share them): another one starts from a snapshot.
            configuration.log?("the store last mirrored \(previous); starting from a snapshot of \(hub)")
            cursors = [:]
        }
        try store.transaction { () throws(MirrorStoreError) in
            for key in try store.cursors().keys where !seen.contains(key) || cursors[key] == nil { try store.setCursor(key, nil) }
            let patterns = JSONValue.array(configuration.patterns.map(JSONValue.string)).serializedString
            let policies = JSONValue.object(JSONObject(configuration.policies.policies.map { ($0.key, JSONValue.string($0.value.rawValue)) }))
            try store.setMeta(["hub": hub, "last_error": nil, "last_error_at": nil, "patterns": patterns, "policies": policies.serializedString,
                               "client": configuration.clientID, "online": "0", "resync": nil, "pid": "\(getpid())",
                               "started": "\(MirrorStore.now())"])
        }
        persistedCursors = cursors
        lastDataVersion = try store.dataVersion()
        for target in wanted {
            let subscription = client.subscribe(target, since: cursors[target.key]) { [self] event in
                try handle(event, target: target)
            }
            targets.append((target, subscription))
        }
        // After the patterns: a dashboard's atomic resolve reaches the
        // mirrored record before its conflicts record.
        watchConflicts(since: cursors[Self.conflictWatchKey])
        client.onStateChange { [self] state, reason in stateChanged(state, reason) }
        client.onSyncProgress { [self] progress in syncProgressed(progress) }
        client.connect()
        tick()
    }

    /// Commits what the hub confirmed, stores the resume points, closes
    /// the connection and waits for its event loop to stop. Call from any
    /// thread but the queue.
    public func stop() {
        queue.sync {
            guard !stopped else { return }
            flushCompleted()
            persistCursors()
            try? store.setMeta(["online": "0", "resync": nil, "pid": nil])
            stopped = true
        }
        client.shutdown()
    }

    func fail(_ message: String) {
        guard !stopped else { return }
        stopped = true
        configuration.log?(message)
        client.close()
        configuration.fatal?(message)
    }

    func stateChanged(_ state: ConnectionState, _ reason: String?) {
        guard !stopped else { return }
        switch state {
        case .live:
            live = true
            replay.restart()
            connectAttempt = 1
            let hub = client.url
            try? store.setMeta(["online": "1", "connected": "\(MirrorStore.now())", "hub_live": hub])
            configuration.log?("live: \(hub)")
            fetchWorkflows()
            report(force: true)
            startReplay()
            pump()
            recheckResolutions()
        case .reconnecting(let attempt, let delay):
            if live || attempt == 1 { configuration.log?("offline: \(reason ?? "connection lost"); retrying") }
            live = false
            replay.restart()
            var values: [String: String?] = ["online": "0"]
            if let reason { values["last_error"] = reason; values["last_error_at"] = "\(MirrorStore.now())" }
            try? store.setMeta(values)
            replayBacklog = nil
            connectAttempt = attempt + 1
            setResync(ResyncState(phase: .waiting, total: delay))
        case .connecting:
            live = false
            setResync(ResyncState(phase: .connecting, done: connectAttempt))
        case .offline:
            live = false
        }
    }

    func fetchWorkflows() {
        guard let fetch = configuration.fetchWorkflows else { return }
        DispatchQueue.global().async { [self] in
            guard let json = fetch(), let catalog = WorkflowCatalog(json: json) else { return }
            queue.async { [self] in
                self.catalog = catalog
                try? store.setMeta(["workflows": catalog.json.serializedString])
            }
        }
    }

    /// Five times a second: other processes' new outbox entries; once a
    /// second: resume points and the report to the hub.
    func tick() {
        guard !stopped else { return }
        if let version = try? store.dataVersion(), version != lastDataVersion {
            lastDataVersion = version
            if live { pump() }
        }
        tickResync()
        let now = MirrorStore.now()
        if now - lastPeriodic >= 1000 {
            lastPeriodic = now
            persistCursors()
            report(force: false)
        }
        queue.asyncAfter(deadline: .now() + .milliseconds(200)) { [self] in tick() }
    }

    /// Every current subscription's resume point, stored if it moved (a
    /// quiet prefix's point moves with the connection's pushes).
    func persistCursors() {
        var changed: [(String, Int64)] = []
        for (target, subscription) in targets {
            guard let cursor = client.cursor(of: subscription), cursor > (persistedCursors[target.key] ?? -1) else { continue }
            changed.append((target.key, cursor))
        }
        if let watch = conflictWatch, pendingResolutions.isEmpty, let cursor = client.cursor(of: watch),
           cursor > (persistedCursors[Self.conflictWatchKey] ?? -1) {
            changed.append((Self.conflictWatchKey, cursor))
        }
        guard !changed.isEmpty else { return }
        do {
            try store.transaction { () throws(MirrorStoreError) in
                for (key, cursor) in changed { try store.setCursor(key, cursor) }
            }
            for (key, cursor) in changed { persistedCursors[key] = cursor }
        } catch {
            configuration.log?("cannot store resume points: \(error)")
        }
    }

    /// The oldest resume point: everything up to it is applied.
    var appliedSeq: Int64? {
        targets.compactMap { client.cursor(of: $0.subscription) }.min()
    }

    func report(force: Bool) {
        guard live, let depth = try? store.outboxDepth() else { return }
        let seq = appliedSeq
        let now = MirrorStore.now()
        if !force, let last = lastReport, last.outbox == depth, last.seq == seq, now - last.at < 10_000 { return }
        lastReport = (depth, seq, now)
        client.report(outbox: depth, seq: seq)
    }
}
