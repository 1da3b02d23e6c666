@preconcurrency import Glibc
import Synchronization
import TallyConcurrency
import TallyEngine
import TallyHTTP
import TallyNet
import TallyProtocol
import TallyStore
import TallyWebSocket

/// Settings of the sync engine, frozen at start.
public struct CoreConfiguration: Sendable {
    public var limits = EngineLimits()
    /// Records and lists kept in memory beyond the uncommitted ones: at
    /// most this many, holding at most `cacheBytes` of heap (estimated,
    /// see `HeapFootprint`). The bytes are the bound that matters: orders
    /// and intake jobs with their history take 2 KiB or more each.
    public var cacheCapacity = 200_000
    public var cacheBytes = 16 << 20
    /// Most records in a prefix subscription's snapshot.
    public var maxSnapshotRecords = 10_000
    /// Record indexes beyond the built-in ones (each workflow's stage
    /// field and `owner`), for live queries on other paths.
    public var indexes: [RecordIndex] = []
    /// Most entries of a list in one reply: a `get`'s page, a list
    /// subscription's snapshot, a REST list envelope, a list's `conflict`
    /// error (a longer list's conflict carries no `entries`).
    public var maxSnapshotEntries = Request.maxListPage
    /// Most subscriptions one connection may hold; more are refused with
    /// `too_many_subscriptions`. A subscription costs about 220 bytes (a
    /// path subscription on a shared record, measured), so a connection at
    /// the cap holds about 21 MiB; dropping 100,000 at a disconnect stalls
    /// the core for about 20 ms (BENCHMARKS.md, "Memory under load", hostile clients).
    public var maxSubscriptionsPerConnection = 100_000
    /// The stock at or below which an item is low when it has no `lowStock`
    /// of its own (`GET /v1/items` reports it; the board marks such items).
    public var lowStock = 5
    /// Most WebSocket connections, hub-wide, that have not authenticated
    /// yet (a hub with users); more upgrades are refused with 503.
    public var maxUnauthenticatedConnections = 1_000
    /// Most changes a resume replays; beyond that the client resnapshots.
    public var maxReplayChanges = 10_000
    /// Most log rows a resume may scan (the log is indexed by seq only, so a
    /// resume reads every change after its `since`); an older `since` is
    /// answered with a snapshot.
    public var maxReplayScan: Int64 = 200_000
    /// How far before `since` a path resume reads, to learn the value under
    /// the path that the first missed change is compared with.
    public var pathReplayLookback: Int64 = 10_000
    public var serverName = "tally/0.3.0"
    /// Access rules and workflows every write passes through.
    public var planner = WorkflowPlanner()
    /// Checks tokens; nil is open mode (no users configured), where every
    /// connection acts as `admin` — the serve command allows that on
    /// loopback only.
    public var authenticator: Authenticator?
    /// Milliseconds since the epoch; injectable for tests.
    public var clock: @Sendable () -> Int64 = HubCore.wallClockMillis

    public init() {}
}

/// The hub's single writer: one thread owns the engine state, the
/// subscription registry and the change sequence.
///
/// Loops parse requests and post them here; the core applies a whole batch
/// of what arrived, hands the resulting store units to the group-commit
/// writer, and queues every reply and push in one FIFO tagged with the seq it
/// depends on. When the writer reports a commit, the FIFO releases
/// everything up to that seq, in order — so a write is acknowledged and
/// pushed only once durable, and each connection receives messages in the
/// order the core produced them.
///
/// `@unchecked Sendable`: the members marked "core thread only" are touched
/// by whichever thread holds the core (`CoreRunner` hands it over under its
/// mailbox's lock); the rest is immutable or atomic.
public final class HubCore: @unchecked Sendable {
    enum Input {
        case open(Session)
        case request(Session, Request)
        case refused(Session, id: JSONValue?, ProtocolError)
        case close(Session)
        case rest(RESTCall)
        case committed(CommitOutcome)
        case stop(@Sendable () -> Void)
        /// Writes from inside the hub (the demo simulator), answered through
        /// `done` on the core thread.
        case system([Write], atomic: Bool, Actor, @Sendable (Result<JSONObject, ProtocolError>) -> Void)
        /// Reads records under a prefix from inside the hub.
        case scan(String, @Sendable ([RecordState]) -> Void)
        /// Reads a live query's first 1000 records from inside the hub.
        case query(Query, @Sendable ([RecordState]) -> Void)
        /// A store shared with other hubs has committed changes up to this
        /// seq (`SharedStore.watchHead`; see HubCore+SharedStore.swift).
        case headAdvanced(Int64)
        /// Hands the sessions' sync health out (`clientRows()`), on the core thread.
        case clientRows(@Sendable (ClientRows) -> Void)
        /// An intake job's analysis ended: advance it to `analyzed`
        /// (IntakeAnalyzer+Core.swift).
        case analyzed(IntakeAnalysisOutcome)
    }

    enum Output {
        case reply(Session, [UInt8])
        /// A reply that hands the client a starting point (hello's seq, a
        /// subscription's snapshot or replay): delivered as `.reply`, but
        /// when a failed commit rolls its seq back the connection is closed
        /// after the `storage_failed` answer, so that the client resumes
        /// from what it really has (see HubCore+StorageFaults.swift).
        case syncReply(Session, [UInt8])
        case fanout(SharedFrame, [Session], isEvent: Bool)
        case http(HTTPResponder, HTTPResponse)
        case close(Session, WebSocketCloseCode, String)
        /// A record entered `media-uploaded` by a write of this hub: its
        /// analysis starts once that write is committed.
        case analyze(IntakeAnalysisJob)
    }

    enum Delivery: Sendable {
        case text(Session, [UInt8])
        /// One push to every session of one loop: the frame travels once
        /// per loop, not once per subscriber.
        case fanout(SharedFrame, [Session])
        case close(Session, WebSocketCloseCode, String)
    }

    /// What one release hands one loop.
    struct LoopBatch {
        let loop: EventLoop
        var items: [Delivery] = []
        /// The sessions of this loop that the fan-out being delivered reaches.
        var fanout: [Session] = []
    }

    /// Who runs the core's work: the mailbox, the loops' inboxes, the core
    /// thread, flat combining and commit in place.
    let runner: CoreRunner
    private let sessionCounter = Atomic<Int>(0)
    let store: any Store
    let configuration: CoreConfiguration
    let metrics = HubMetrics()
    let logger: Logger
    /// Refusals (tokens, rules, origins) are logged a few a second at most.
    let refusalLog = LogRateLimit()
    /// Catch-ups that failed (the shared store cannot be read): a line every
    /// 10 s at most, however many clients retry meanwhile.
    let catchUpFailureLog = LogRateLimit(burst: 1, intervalMillis: 10_000)

    // Core thread only, from here on.
    let engine: Engine
    var cache: StateCache
    var registry = SubscriptionRegistry()
    var sessions: [Session?] = []
    /// Highest seq assigned / committed.
    var headSeq: Int64
    var committedSeq: Int64
    /// Accepted changes not yet committed, in seq order (for resume replays).
    var uncommitted: [Change] = []
    /// Idempotency keys of uncommitted writes: the reply members and their seq.
    var recentKeys = RecentKeys()
    // The members touched per delivery skip the runtime exclusivity check
    // (see `Connection.outbound` in TallyNet): one thread holds the core at
    // a time, and none is accessed while another access to it is open.
    @exclusivity(unchecked) var units: [StoreUnit] = []
    @exclusivity(unchecked) var held: [(seq: Int64, output: Output)] = []
    @exclusivity(unchecked) var heldHead = 0
    /// Indexed by loop id (a handful of loops: scanning them is cheaper
    /// than hashing per delivery).
    @exclusivity(unchecked) private var batches: [LoopBatch?] = []
    var slotScratch: [Int] = []
    /// The request being handled hands the client a starting point: its
    /// answer is a `.syncReply`.
    var answeringSync = false
    /// Per workflow prefix, built by a recount on first use.
    var workflowStats: [String: WorkflowStats] = [:]
    /// The record indexes the store keeps (built-in and configured).
    let recordIndexes: [RecordIndex]
    /// Live queries with subscribers, and the id the next new one gets.
    var liveQueries: [Query: LiveQueryState] = [:]
    var nextQueryID: Int64 = 1
    /// Failed commits since the last success, for rate-limited logs.
    var storageFaults = StorageFaults()
    /// The store when other hubs write to it too, with its reader (see
    /// HubCore+SharedStore.swift); nil for a store of this hub's own.
    let shared: (any SharedStore)?
    let sharedReader: (any SharedStoreReading)?
    /// The highest global head the store has announced.
    var knownHead: Int64 = 0
    /// Inputs waiting for the uncommitted writes before them to commit (a
    /// shared store only: anything but a write waits while writes are in
    /// flight, since another hub's commit may send those back to be run again).
    var parked: [Input] = []
    /// The writes whose answers wait for a commit, with the seq they wait
    /// for: run again, in order, when another hub's commit got in first.
    var rerunnable: [(seq: Int64, input: Input)] = []
    /// What undoes each uncommitted write's move of the workflow stats.
    var statsUndo: [(seq: Int64, prefix: String, inverse: WorkflowStats.Delta)] = []
    /// While a write runs on a shared store with writes in flight: the
    /// head, the lowest seq its outputs wait for, so that they leave with
    /// the state they were decided on and can be taken back until then (0
    /// otherwise; see `rerunnably`).
    @exclusivity(unchecked) var holdFloor: Int64 = 0
    var floorCheckedAt: Int64 = 0
    /// When the core started: reconnecting clients are spread out for a
    /// while after (see `retryAfter`).
    let startedAt: Int64
    /// Analyses the photos of intake jobs (set before `start`; nil: none).
    weak var intakeAnalyzer: IntakeAnalyzer?

    public init(store: any Store, configuration: CoreConfiguration, logger: Logger) throws(StoreError) {
        self.startedAt = configuration.clock()
        self.store = store
        runner = CoreRunner(store: store)
        self.configuration = configuration
        self.logger = logger
        var limits = configuration.limits
        limits.maxConflictEntries = configuration.maxSnapshotEntries
        self.engine = Engine(limits: limits)
        let reader = try store.makeReader()
        var indexes = RecordIndex.defaults(for: configuration.planner.workflows.workflows)
        for index in configuration.indexes where !indexes.contains(index) { indexes.append(index) }
        recordIndexes = indexes
        try Self.prepareIndexes(indexes, store: store, reader: reader, logger: logger)
        let bounds = try reader.sequenceBounds()
        headSeq = bounds.head
        committedSeq = bounds.head
        cache = StateCache(reader: reader, capacity: configuration.cacheCapacity,
                           byteCapacity: configuration.cacheBytes)
        shared = store as? any SharedStore
        sharedReader = shared == nil ? nil : reader as? any SharedStoreReading
        knownHead = bounds.head
        metrics.sharedStore.store(shared != nil, ordering: .relaxed)
        metrics.headSeq.store(Int(headSeq), ordering: .relaxed)
        metrics.committedSeq.store(Int(headSeq), ordering: .relaxed)
        metrics.floorSeq.store(Int(bounds.floor), ordering: .relaxed)
    }

    /// Starts the store writer and the core thread, and for a shared store
    /// the watch of other hubs' commits.
    public func start() {
        runner.start(self)
        if let shared { watchSharedHead(shared) }
    }

    /// Stops after the work already posted; commits what is queued and closes
    /// the store. Blocks until done.
    public func stop() {
        let done = CountdownLatch(count: 1)
        runner.post(.stop { done.countDown() })
        done.wait()
    }

    func post(_ input: Input) { runner.post(input) }

    /// Posts from a loop thread: gathered per loop iteration and handed
    /// over at its end, done in place when the core is free (`CoreRunner`).
    func post(from loop: EventLoop, _ input: Input) { runner.post(from: loop, input, to: self) }

    /// Applies writes as `actor`, as a client's would be; `done` runs on the
    /// core thread once they are accepted (not yet committed) or refused.
    public func submit(_ writes: [Write], atomic: Bool = false, as actor: Actor,
                       done: @escaping @Sendable (Result<JSONObject, ProtocolError>) -> Void = { _ in }) {
        runner.post(.system(writes, atomic: atomic, actor, done))
    }

    /// The first 1000 records under `prefix`, delivered on the core thread.
    public func scan(prefix: String, done: @escaping @Sendable ([RecordState]) -> Void) {
        runner.post(.scan(prefix, done))
    }

    /// The first 1000 records of a live query's result, delivered on the core thread.
    public func query(_ query: Query, done: @escaping @Sendable ([RecordState]) -> Void) {
        runner.post(.query(query, done))
    }

    func nextSessionID() -> Int { sessionCounter.add(1, ordering: .relaxed).newValue }

    public static let wallClockMillis: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    // MARK: The work of one batch

    /// The core's work for one batch, on whichever thread holds the core
    /// (see `CoreRunner`). Returns the stop request's callback if the batch
    /// held one, and whether it handed units to the store. With `lender`
    /// the units are queued without waking the store's writer: the caller
    /// commits them in place next.
    func process(_ batch: [Input], committingIn lender: (any InPlaceCommitting)? = nil)
        -> (stopped: (@Sendable () -> Void)?, submitted: Bool) {
        var stopped: (@Sendable () -> Void)?
        for input in batch {
            if shared != nil, mustPark(input) {
                parked.append(input)
            } else if let done = take(input) {
                stopped = done
            }
        }
        if let lender {
            for unit in units { lender.submit(unit, wakeWriter: false) }
        } else {
            for unit in units { store.submit(unit) }
        }
        let submitted = !units.isEmpty
        units.removeAll(keepingCapacity: true)
        release()
        return (stopped, submitted)
    }

    // MARK: Outputs

    /// Queues `output`, to leave once `seq` is committed.
    func emit(_ output: Output, after seq: Int64) {
        held.append((max(seq, holdFloor), output))
    }

    func emitUnit(_ unit: StoreUnit) { units.append(unit) }

    /// Sends every held output whose commit happened, in order, batching
    /// deliveries per loop: one task per loop per batch.
    private func release() {
        while heldHead < held.count, held[heldHead].seq <= committedSeq {
            deliver(held[heldHead].output, seq: held[heldHead].seq)
            heldHead += 1
        }
        if heldHead == held.count {
            held.removeAll(keepingCapacity: true)
            heldHead = 0
        } else if heldHead > 1024, heldHead * 2 > held.count {
            held.removeFirst(heldHead)
            heldHead = 0
        }
        metrics.heldOutputs.store(held.count - heldHead, ordering: .relaxed)
        // Hand each loop its items whole (the array goes to the loop's task).
        for index in batches.indices where batches[index]?.items.isEmpty == false {
            let items = batches[index]!.items
            batches[index]!.items = []
            batches[index]!.items.reserveCapacity(items.count)
            batches[index]!.loop.execute {
                for item in items {
                    switch item {
                    case .text(let session, let bytes): session.socket.send(.text, bytes)
                    case .fanout(let frame, let sessions): for session in sessions { session.socket.send(frame) }
                    case .close(let session, let code, let reason): session.socket.close(code, reason: reason)
                    }
                }
            }
        }
    }

    /// `seq`: what the output waited for — the seq a reply reports, or the
    /// change a push carries — so each session's `seenSeq` follows it.
    private func deliver(_ output: Output, seq: Int64) {
        switch output {
        case .reply(let session, let bytes), .syncReply(let session, let bytes):
            if seq > session.seenSeq { session.seenSeq = seq }
            queue(.text(session, bytes), on: session.loop)
        case .fanout(let frame, let targets, let isEvent):
            for session in targets {
                if seq > session.seenSeq { session.seenSeq = seq }
                let id = session.loop.id
                if id >= batches.count || batches[id] == nil { makeBatch(for: session.loop) }
                batches[id]!.fanout.append(session)
            }
            for index in batches.indices where batches[index]?.fanout.isEmpty == false {
                let sessions = batches[index]!.fanout
                batches[index]!.fanout = []
                batches[index]!.fanout.reserveCapacity(sessions.count)
                batches[index]!.items.append(.fanout(frame, sessions))
            }
            if isEvent {
                metrics.eventDeliveries.add(targets.count, ordering: .relaxed)
            } else {
                metrics.pushes.add(targets.count, ordering: .relaxed)
            }
        case .http(let responder, let response):
            responder.respond(response)
        case .close(let session, let code, let reason):
            queue(.close(session, code, reason), on: session.loop)
        case .analyze(let job):
            deliverAnalysisJob(job)
        }
    }

    private func queue(_ delivery: Delivery, on loop: EventLoop) {
        if loop.id >= batches.count || batches[loop.id] == nil { makeBatch(for: loop) }
        batches[loop.id]!.items.append(delivery)
    }

    private func makeBatch(for loop: EventLoop) {
        if loop.id >= batches.count { batches.append(contentsOf: repeatElement(nil, count: loop.id + 1 - batches.count)) }
        batches[loop.id] = LoopBatch(loop: loop)
    }

    // MARK: Answers

    /// `{"id":…,"ok":true,…}` where the members after `ok` come from `body`.
    func answer(_ session: Session, id: JSONValue?, after seq: Int64 = 0, body: (inout MessageWriter) -> Void) {
        var writer = MessageWriter()
        if let id { writer.value("id", id) }
        writer.bool("ok", true)
        body(&writer)
        metrics.requests.add(1, ordering: .relaxed)
        let bytes = writer.finish()
        emit(answeringSync ? .syncReply(session, bytes) : .reply(session, bytes), after: seq)
    }

    func answer(_ session: Session, id: JSONValue?, error: ProtocolError) {
        var writer = MessageWriter()
        if let id { writer.value("id", id) }
        writer.bool("ok", false)
        writer.value("error", error.json)
        metrics.requests.add(1, ordering: .relaxed)
        metrics.requestErrors.add(1, ordering: .relaxed)
        noteRefusal(error, actor: session.actor)
        emit(.reply(session, writer.finish()), after: 0)
    }
}
