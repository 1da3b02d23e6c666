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
        public var url: String
        /// How the hub was named on the command line (stored for status
        /// and the next run); defaults to `url`.
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
        /// Large resyncs: called on the queue as chunks are applied.
        public var progress: (@Sendable (Progress) -> Void)?
        public var log: (@Sendable (String) -> Void)?
        /// The store failed for good; the engine has stopped.
        public var fatal: (@Sendable (String) -> Void)?
        /// Writes in flight at once.
        public var window = 64

        public init(url: String, token: String?, clientID: String, patterns: [String]) {
            self.url = url
            self.token = token
            self.clientID = clientID
            self.patterns = patterns
        }
    }

    public struct Progress: Sendable {
        public var label: String
        public var done: Int
        public var total: Int
    }

    let store: MirrorStore
    let configuration: Configuration
    public let client: TallyClient
    var queue: DispatchQueue { client.queue }
    var catalog: WorkflowCatalog
    private var targets: [(target: SubscriptionTarget, subscription: Subscription)] = []
    private var persistedCursors: [String: Int64] = [:]

    private var live = false
    private var stopped = false
    /// Bumped at every connection change: replies from before are stale.
    private var epoch = 0
    private var inflight: [Int64: OutboxEntry] = [:]
    private var inflightNames: Set<String> = []
    /// Pending entries read from the store, not yet sent, in outbox order.
    private var loaded: [OutboxEntry] = []
    private var maxLoadedID: Int64 = 0
    /// Entries the hub confirmed, to remove in the next transaction.
    private var completed: [(entry: OutboxEntry, result: WriteResult?)] = []
    private var flushScheduled = false
    private var lastDataVersion: Int64 = -1
    private var lastPeriodic: Int64 = 0
    private var lastReport: (outbox: Int64, seq: Int64?, at: Int64)?

    public init(store: MirrorStore, configuration: Configuration) throws(MirrorError) {
        self.store = store
        self.configuration = configuration
        do { catalog = try store.workflows() } catch { throw .store(error) }
        var options = configuration.options
        options.helloExtras = { [store] in
            ["outbox": .int((try? store.outboxDepth()) ?? 0)]
        }
        do {
            client = try TallyClient(url: configuration.url, token: configuration.token,
                                     clientName: configuration.clientID, options: options)
        } catch {
            throw .refused(error)
        }
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

    private func begin() throws(MirrorStoreError) {
        var seen = Set<String>()
        var wanted: [SubscriptionTarget] = []
        for pattern in configuration.patterns {
            for target in MirrorTarget.targets(forPattern: pattern, catalog: catalog) where seen.insert(target.key).inserted {
                wanted.append(target)
            }
        }
        var cursors = try store.cursors()
        let hub = configuration.serverLabel ?? configuration.url
        if let previous = try store.meta("hub"), previous != hub, !cursors.isEmpty {
            // Resume points are seqs of one hub: another one starts from a snapshot.
            configuration.log?("the store last mirrored \(previous); starting from a snapshot of \(hub)")
            cursors = [:]
        }
        try store.transaction { () throws(MirrorStoreError) in
            for key in try store.cursors().keys where !seen.contains(key) || cursors[key] == nil { try store.setCursor(key, nil) }
            let patterns = JSONValue.array(configuration.patterns.map(JSONValue.string)).serializedString
            let policies = JSONValue.object(JSONObject(configuration.policies.policies.map { ($0.key, JSONValue.string($0.value.rawValue)) }))
            try store.setMeta(["hub": hub, "last_error": nil, "last_error_at": nil, "patterns": patterns, "policies": policies.serializedString,
                               "client": configuration.clientID, "online": "0", "pid": "\(getpid())",
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
        client.onStateChange { [self] state, reason in stateChanged(state, reason) }
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
            try? store.setMeta(["online": "0", "pid": nil])
            stopped = true
        }
        client.shutdown()
    }

    private func fail(_ message: String) {
        guard !stopped else { return }
        stopped = true
        configuration.log?(message)
        client.close()
        configuration.fatal?(message)
    }

    private func stateChanged(_ state: ConnectionState, _ reason: String?) {
        guard !stopped else { return }
        switch state {
        case .live:
            live = true
            epoch += 1
            try? store.setMeta(["online": "1", "connected": "\(MirrorStore.now())"])
            configuration.log?("live: \(configuration.url)")
            fetchWorkflows()
            report(force: true)
            pump()
        case .reconnecting(let attempt, let delay):
            if live || attempt == 1 { configuration.log?("offline: \(reason ?? "connection lost"); retrying") }
            live = false
            epoch += 1
            requeueInflight()
            var values: [String: String?] = ["online": "0"]
            if let reason { values["last_error"] = reason; values["last_error_at"] = "\(MirrorStore.now())" }
            _ = delay
            try? store.setMeta(values)
        case .connecting, .offline:
            live = false
        }
    }

    private func fetchWorkflows() {
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
    private func tick() {
        guard !stopped else { return }
        if let version = try? store.dataVersion(), version != lastDataVersion {
            lastDataVersion = version
            if live { pump() }
        }
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
    private func persistCursors() {
        var changed: [(String, Int64)] = []
        for (target, subscription) in targets {
            guard let cursor = client.cursor(of: subscription), cursor > (persistedCursors[target.key] ?? -1) else { continue }
            changed.append((target.key, cursor))
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
    private var appliedSeq: Int64? {
        targets.compactMap { client.cursor(of: $0.subscription) }.min()
    }

    private func report(force: Bool) {
        guard live, let depth = try? store.outboxDepth() else { return }
        let seq = appliedSeq
        let now = MirrorStore.now()
        if !force, let last = lastReport, last.outbox == depth, last.seq == seq, now - last.at < 10_000 { return }
        lastReport = (depth, seq, now)
        client.report(outbox: depth, seq: seq)
    }

    // MARK: Applying the hub's changes

    private func handle(_ event: SubscriptionEvent, target: SubscriptionTarget) throws(MirrorStoreError) {
        guard !stopped else { throw MirrorStoreError("the mirror is stopping") }
        switch event {
        case .snapshot(let snapshot):
            try apply(snapshot, target: target)
        case .changes(let changes, let through):
            try apply(changes, through: through, target: target)
        case .failed(let error):
            let message = "the hub refused to mirror \(target.key): \(error.message) (\(error.code))"
            configuration.log?(message)
            try? store.setMeta(["last_error": message, "last_error_at": "\(MirrorStore.now())"])
        case .event:
            break
        }
    }

    static let chunkSize = 2000

    private func apply(_ snapshot: Snapshot, target: SubscriptionTarget) throws(MirrorStoreError) {
        switch target {
        case .prefix(let prefix):
            let records = snapshot.records
            let total = records.count
            let label = "resync \(prefix.isEmpty ? "(all)" : prefix)"
            var start = 0
            repeat {
                let end = min(start + Self.chunkSize, total)
                try store.transaction { () throws(MirrorStoreError) in
                    for record in records[start..<end] {
                        try putHubRecord(record.name, version: record.version, seq: record.seq, data: record.data)
                    }
                    if end == total {
                        let present = Set(records.map(\.name))
                        for row in try store.records(prefix: prefix, withDeleted: true)
                        where !present.contains(row.name) && (row.base != nil || row.version > 0) {
                            try hubRecordGone(row.name, seq: snapshot.seq)
                        }
                        try store.setCursor(target.key, snapshot.seq)
                        try noteSeq(records.lazy.map(\.seq).max() ?? 0)
                    }
                }
                start = end
                if total > 1000 { configuration.progress?(Progress(label: label, done: end, total: total)) }
            } while start < total
        case .record(let name):
            try store.transaction { () throws(MirrorStoreError) in
                if let record = snapshot.records.first {
                    try putHubRecord(name, version: record.version, seq: record.seq, data: record.data)
                } else {
                    try hubRecordGone(name, seq: snapshot.seq)
                }
                try store.setCursor(target.key, snapshot.seq)
                try noteSeq(snapshot.records.first?.seq ?? 0)
            }
        case .list(let name):
            try store.transaction { () throws(MirrorStoreError) in
                if let list = snapshot.list {
                    try store.putList(MirrorList(name: name, version: list.version, seq: list.seq, entries: list.entries))
                } else {
                    try store.removeList(name)
                }
                try store.setCursor(target.key, snapshot.seq)
                try noteSeq(snapshot.list?.seq ?? 0)
            }
        case .path, .topic:
            break
        }
    }

    private func apply(_ changes: [Change], through: Int64, target: SubscriptionTarget) throws(MirrorStoreError) {
        let total = changes.count
        var start = 0
        repeat {
            let end = min(start + Self.chunkSize, total)
            try store.transaction { () throws(MirrorStoreError) in
                for change in changes[start..<end] { try apply(change) }
                // Changes come in seq order: the chunk's last is a valid resume point.
                let cursor = end == total ? through : changes[end - 1].seq
                try store.setCursor(target.key, cursor)
                if end > start { try noteSeq(changes[end - 1].seq) }
            }
            start = end
            if total > 1000 { configuration.progress?(Progress(label: "catch up \(target.key)", done: end, total: total)) }
        } while start < total
        // The hub's copies moved: pending writes may now be sendable again.
        if live, !loaded.isEmpty { pump() }
    }

    private func apply(_ change: Change) throws(MirrorStoreError) {
        if change.isList {
            let list = try store.list(change.name)
            if let list, list.seq >= change.seq { return }
            do {
                if let entries = try change.applied(toEntries: list?.entries) {
                    try store.putList(MirrorList(name: change.name, version: change.version, seq: change.seq, entries: entries))
                } else {
                    try store.removeList(change.name)
                }
            } catch let error as ProtocolError {
                configuration.log?("cannot apply change \(change.seq) to list \(change.name): \(error.message)")
            } catch {
                throw error as? MirrorStoreError ?? MirrorStoreError("\(error)")
            }
            return
        }
        let row = try store.record(change.name)
        if let row, row.seq >= change.seq { return }
        let base: JSONObject?
        do {
            base = try change.applied(to: row?.base)
        } catch {
            // The copy and the hub disagree about the record's shape: take
            // what is known and let `tally verify` show the difference.
            configuration.log?("cannot apply change \(change.seq) to \(change.name): \(error.message)")
            return
        }
        if let base {
            try putHubRecord(change.name, version: change.version, seq: change.seq, data: base)
        } else {
            try hubRecordGone(change.name, seq: change.seq)
        }
    }

    /// The hub's copy of a record changed: the local view follows (with
    /// the pending writes on top, if there are any).
    private func putHubRecord(_ name: String, version: Int64, seq: Int64, data: JSONObject) throws(MirrorStoreError) {
        let view = try store.hasPending(name) ? try store.view(of: name, over: data, catalog: catalog) : data
        try store.putRecord(MirrorRecord(name: name, version: version, seq: seq, data: view, base: data, updated: 0))
    }

    private func hubRecordGone(_ name: String, seq: Int64) throws(MirrorStoreError) {
        guard try store.hasPending(name) else { return try store.removeRecord(name) }
        let view = try store.view(of: name, over: nil, catalog: catalog)
        try store.putRecord(MirrorRecord(name: name, version: 0, seq: seq, data: view, base: nil, updated: 0))
    }

    /// The seq of the last hub change the mirror holds (`mirror status`).
    private func noteSeq(_ seq: Int64) throws(MirrorStoreError) {
        let current = Int64(try store.meta("last_seq") ?? "") ?? 0
        if seq > current { try store.setMeta(["last_seq": "\(seq)"]) }
    }

    // MARK: Replaying the outbox

    /// Entries that were in flight when the connection went go back to the
    /// front of the line; they are sent again with the same keys.
    private func requeueInflight() {
        guard !inflight.isEmpty else { return }
        loaded = (Array(inflight.values) + loaded).sorted { $0.id < $1.id }
        inflight = [:]
        inflightNames = []
    }

    /// Sends what may go now: outbox order, one write per record in flight.
    private func pump() {
        guard live, !stopped else { return }
        if loaded.isEmpty {
            do {
                loaded = try store.pendingEntries(after: maxLoadedID, limit: 1000)
            } catch {
                return fail("cannot read the outbox: \(error)")
            }
            if let last = loaded.last { maxLoadedID = last.id }
        }
        var blocked: Set<String> = []
        var index = 0
        while inflight.count < configuration.window, index < loaded.count {
            let entry = loaded[index]
            if inflightNames.contains(entry.name) || blocked.contains(entry.name) {
                blocked.insert(entry.name)
                index += 1
                continue
            }
            loaded.remove(at: index)
            send(entry)
        }
    }

    private func send(_ entry: OutboxEntry) {
        inflight[entry.id] = entry
        inflightNames.insert(entry.name)
        let (id, epoch) = (entry.id, self.epoch)
        client.sendIfLive(entry.message) { [self] result in replied(id, epoch: epoch, result) }
    }

    private func replied(_ id: Int64, epoch: Int, _ result: Result<JSONObject, ProtocolError>) {
        guard epoch == self.epoch, !stopped, var entry = inflight[id] else { return }
        let isAdvance = entry.message["op"]?.stringValue == "advance"
        switch result {
        case .success(let reply):
            if let plan = entry.plan, entry.step + 1 < plan.count {
                nextStep(&entry)
            } else {
                finish(entry, WriteResult(json: reply))
            }
        case .failure(let error) where error.code == .conflict:
            conflicted(entry, error)
        case .failure(let error) where error.code == .illegalTransition && isAdvance:
            // The hub's stage cannot go where this one wanted: it stands.
            configuration.log?("\(entry.name): stage stays as the hub has it (\(error.message))")
            if let plan = entry.plan, entry.step + 1 < plan.count { nextStep(&entry) } else { finish(entry, nil) }
        case .failure(let error) where error.isTransient:
            retryLater(entry, error)
        case .failure(let error):
            refused(entry, error)
        }
    }

    private func nextStep(_ entry: inout OutboxEntry) {
        entry.step += 1
        do {
            try store.db.query("UPDATE outbox SET step = ? WHERE id = ?", [.int(Int64(entry.step)), .int(entry.id)])
        } catch {
            return fail("cannot record progress of outbox entry \(entry.id): \(error)")
        }
        inflight[entry.id] = nil
        inflightNames.remove(entry.name)
        send(entry)
    }

    private func finish(_ entry: OutboxEntry, _ result: WriteResult?) {
        inflight[entry.id] = nil
        inflightNames.remove(entry.name)
        completed.append((entry, result))
        // The hub applied exactly this write on exactly its base: the next
        // writes to the record were made on top of it, so their base is the new version.
        if let next = Self.baseAfter(entry, result) {
            for index in loaded.indices where loaded[index].name == entry.name && loaded[index].plan == nil
                && loaded[index].baseVersion == entry.baseVersion {
                loaded[index].baseVersion = next
            }
        }
        if !flushScheduled {
            flushScheduled = true
            queue.async { [self] in flushCompleted() }
        }
        pump()
    }

    /// The base version of the record's next writes once `entry` is
    /// confirmed, when the hub applied exactly it on exactly its base
    /// (the version moved by one): they were made on top of it. After a
    /// whole-record delete that is 0 (the record must not exist).
    static func baseAfter(_ entry: OutboxEntry, _ result: WriteResult?) -> Int64? {
        guard let result, entry.plan == nil, entry.baseVersion >= 0, result.version == entry.baseVersion + 1 else { return nil }
        if entry.op["op"]?.stringValue == "delete", entry.op["path"] == nil { return 0 }
        return result.version
    }

    /// Removes the confirmed entries in one transaction (one fsync for a
    /// whole burst of replies).
    private func flushCompleted() {
        flushScheduled = false
        guard !completed.isEmpty else { return }
        let batch = completed
        completed = []
        do {
            try store.transaction { () throws(MirrorStoreError) in
                for (entry, result) in batch {
                    try store.db.query("DELETE FROM outbox WHERE id = ?", [.int(entry.id)])
                    guard let result else {
                        // Nothing was written (the hub already held it): no
                        // push will come, so the local view drops the write now.
                        try refreshView(entry.name)
                        continue
                    }
                    if let next = Self.baseAfter(entry, result) {
                        try store.db.query("""
                            UPDATE outbox SET base_version = ? WHERE name = ? AND base_version = ? AND id > ?
                              AND state = 'pending' AND plan IS NULL
                            """, [.int(next), .text(entry.name), .int(entry.baseVersion), .int(entry.id)])
                    }
                    // No push will come for a record outside the mirrored
                    // patterns: the confirmed write is its copy.
                    guard let row = try store.record(entry.name) else { continue }
                    if !covered(entry.name) {
                        if try store.pendingEntries(name: entry.name).isEmpty {
                            try store.putRecord(MirrorRecord(name: row.name, version: result.version, seq: result.seq,
                                                             data: row.data, base: row.data, updated: 0))
                        }
                    } else if row.seq >= result.seq {
                        // The write's push came first: recompute without the
                        // entry (else the push to come recomputes).
                        try refreshView(entry.name)
                    }
                }
            }
        } catch {
            fail("cannot record confirmed outbox entries: \(error)")
        }
    }

    private func covered(_ name: String) -> Bool {
        targets.contains { target in
            switch target.target {
            case .prefix(let prefix): name.hasBytePrefix(prefix)
            case .record(let record): record == name
            default: false
            }
        }
    }

    private func retryLater(_ entry: OutboxEntry, _ error: ProtocolError) {
        inflight[entry.id] = nil
        inflightNames.remove(entry.name)
        var entry = entry
        entry.attempts += 1
        entry.lastError = error.message
        loaded.append(entry)
        loaded.sort { $0.id < $1.id }
        if error.code != .disconnected {
            _ = try? store.db.query("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                                [.text("\(error.message) (\(error.code))"), .int(entry.id)])
            queue.asyncAfter(deadline: .now() + .seconds(1)) { [self] in pump() }
        }
    }

    /// The hub refused the write for good: the entry is kept as failed (see
    /// `tally mirror status`) and the local copy drops its effect.
    private func refused(_ entry: OutboxEntry, _ error: ProtocolError) {
        inflight[entry.id] = nil
        inflightNames.remove(entry.name)
        flushCompleted()
        let message = "the hub refused outbox entry \(entry.id) (\(entry.op["op"]?.stringValue ?? "write") \(entry.name)): \(error.message) (\(error.code))"
        configuration.log?(message)
        do {
            try store.transaction { () throws(MirrorStoreError) in
                try store.db.query("UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = ? WHERE id = ?",
                                   [.text("\(error.message) (\(error.code))"), .int(entry.id)])
                try refreshView(entry.name)
                try store.setMeta(["last_error": message, "last_error_at": "\(MirrorStore.now())"])
            }
        } catch {
            return fail("cannot record a refused outbox entry: \(error)")
        }
        pump()
    }

    /// Recomputes a record's local view from its hub copy and pending writes.
    private func refreshView(_ name: String) throws(MirrorStoreError) {
        let row = try store.record(name)
        let view = try store.view(of: name, over: row?.base, catalog: catalog)
        if view == nil, row?.base == nil, (row?.version ?? 0) == 0, try store.pendingEntries(name: name).isEmpty {
            try store.removeRecord(name)
        } else {
            try store.putRecord(MirrorRecord(name: name, version: row?.version ?? 0, seq: row?.seq ?? 0, data: view,
                                             base: row?.base, updated: 0))
        }
    }

    // MARK: Conflicts

    private func conflicted(_ entry: OutboxEntry, _ error: ProtocolError) {
        let rule = catalog.rule(for: entry.name)
        if entry.op["op"]?.stringValue == "advance" {
            if let stage = error.details["stage"]?.stringValue {
                return rewrite(entry, steps: ThreeWayMerge.mergeStage(name: entry.name, op: entry.op, hubStage: stage, rule: rule),
                               conflicts: [])
            }
            return fetchHubCopy(entry) { [self] hub, _ in
                let stage = hub?[rule?.stageField ?? "stage"]?.stringValue ?? ""
                rewrite(entry, steps: ThreeWayMerge.mergeStage(name: entry.name, op: entry.op, hubStage: stage, rule: rule),
                        conflicts: [])
            }
        }
        let version = error.details["version"]?.int64 ?? 0
        if version == 0 || error.details["data"]?.objectValue != nil {
            return merge(entry, hub: version == 0 ? nil : error.details["data"]?.objectValue, hubVersion: version)
        }
        fetchHubCopy(entry) { [self] hub, version in merge(entry, hub: hub, hubVersion: version) }
    }

    private func merge(_ entry: OutboxEntry, hub: JSONObject?, hubVersion: Int64) {
        let policy = configuration.policies.policy(for: entry.name)
        let outcome = ThreeWayMerge.merge(name: entry.name, op: entry.op, base: entry.base, hub: hub, hubVersion: hubVersion,
                                          rule: catalog.rule(for: entry.name), policy: policy)
        rewrite(entry, steps: outcome.steps, conflicts: outcome.conflicts, policy: policy)
    }

    /// The hub's current copy, for a conflict reply that did not carry it.
    private func fetchHubCopy(_ entry: OutboxEntry, _ then: @escaping @Sendable (JSONObject?, Int64) -> Void) {
        let epoch = self.epoch
        client.sendIfLive(["op": "get", "name": .string(entry.name)]) { [self] result in
            guard epoch == self.epoch, !stopped, inflight[entry.id] != nil else { return }
            switch result {
            case .success(let reply): then(reply["data"]?.objectValue, reply["version"]?.int64 ?? 0)
            case .failure(let error) where error.code == .notFound: then(nil, 0)
            case .failure(let error) where error.isTransient: retryLater(entry, error)
            case .failure(let error): refused(entry, error)
            }
        }
    }

    /// Replaces an entry's write by the merge's writes (stored first, with
    /// any conflicts, in one transaction), then sends them.
    private func rewrite(_ entry: OutboxEntry, steps: [JSONObject], conflicts: [FieldConflict], policy: MergePolicy = .hub) {
        var entry = entry
        if steps.isEmpty && conflicts.isEmpty {
            configuration.log?("\(entry.name): the hub already holds the merged state")
            return finish(entry, nil)
        }
        entry.revision += 1
        if entry.revision > 50 {
            return refused(entry, ProtocolError(.conflict, "the record kept changing on the hub through 50 merges"))
        }
        let now = MirrorStore.now()
        let records = conflicts.map { conflict in
            ConflictRecord(id: Self.conflictID(entry.idem, conflict.field), name: entry.name, field: conflict.field,
                           local: conflict.local, hub: conflict.hub, base: conflict.base, policy: policy.rawValue,
                           created: now, resolved: nil)
        }
        var plan = steps
        for record in records {
            plan.append(["op": "set", "name": .string("conflicts/\(record.id)"),
                         "data": .object(record.hubRecord(mirror: configuration.clientID))])
        }
        entry.plan = plan
        entry.step = 0
        flushCompleted()
        do {
            try store.transaction { () throws(MirrorStoreError) in
                try store.db.query("UPDATE outbox SET plan = ?, step = 0, revision = ?, attempts = attempts + 1 WHERE id = ?",
                                   [.text(JSONValue.array(plan.map(JSONValue.object)).serializedString),
                                    .int(Int64(entry.revision)), .int(entry.id)])
                for record in records { try store.insertConflict(record) }
                try refreshView(entry.name)
            }
        } catch {
            return fail("cannot record a merge: \(error)")
        }
        for record in records {
            configuration.log?("conflict \(record.id): \(record.name) \(record.field) changed here and on the hub; kept the hub's value")
        }
        inflight[entry.id] = nil
        inflightNames.remove(entry.name)
        send(entry)
    }

    /// The same entry and field always name the same conflict, so a merge
    /// done again after a crash records it once.
    static func conflictID(_ idem: String, _ field: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "\(idem)|\(field)".utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let digits = Array("0123456789abcdef")
        return String((0..<16).map { digits[Int((hash >> (60 - UInt64($0) * 4)) & 0xf)] })
    }
}
