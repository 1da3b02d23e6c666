import TallyEngine
import TallyNet
import TallyProtocol
import TallyStore
import TallyWebSocket

/// The protocol's operations on a WebSocket session.
extension HubCore {
    func handle(_ request: Request, from session: Session) {
        // A closed connection's queued requests are dropped: building the
        // snapshots it asked for would only cost time and memory.
        guard session.slot >= 0, !session.isClosed else { return }
        let id = request.id
        if case .hello = request.operation {} else if session.actor == nil {
            return answer(session, id: id, error: ProtocolError(.unauthorized,
                "this hub needs a token: send {\"op\":\"hello\",\"token\":…} first, or an Authorization: Bearer header on the upgrade"))
        }
        let actor = session.actor ?? Self.nobody
        session.lastHeardAt = configuration.clock()
        switch request.operation {
        case .hello(let hello):
            catchUpIfBehind(since: hello.since)
            self.hello(hello, id: id, session: session)
        case .get(let target): get(target, id: id, session: session, actor: actor)
        case .subscribe(let target, let since):
            catchUpIfBehind(since: since ?? session.since)
            subscribe(normalized(target, actor: actor), since: since ?? session.since, id: id, session: session, actor: actor)
        case .unsubscribe(let target):
            let target = normalized(target, actor: actor)
            if registry.remove(target, slot: session.slot) {
                dropUnusedQueries([target])
                metrics.subscriptions.store(registry.count, ordering: .relaxed)
                answer(session, id: id) { _ in }
            } else {
                answer(session, id: id, error: ProtocolError(.notSubscribed, "this connection has no such subscription"))
            }
        case .write(let writes, let atomic):
            switch write(writes, atomic: atomic, key: request.idempotencyKey, actor: actor) {
            case .success(let result):
                answer(session, id: id, after: result.seq) { $0.members(of: result.reply) }
                fanOut(result.changes)
            case .failure(let error):
                answer(session, id: id, error: error)
            }
        case .report(let outbox, let seq):
            if let outbox { setOutbox(outbox, of: session) }
            if let seq, seq > session.seenSeq { session.seenSeq = min(seq, headSeq) }
            answer(session, id: id) { _ in }
        case .publish(let topic, let data):
            do { try configuration.planner.policy.check(actor, .publish, name: topic, owner: nil) } catch {
                return answer(session, id: id, error: error)
            }
            publish(topic: topic, data: data) { count in
                self.answer(session, id: id) { $0.int("delivered", Int64(count)) }
            }
        }
    }

    // MARK: hello

    private func hello(_ hello: Hello, id: JSONValue?, session: Session) {
        guard !session.saidHello else {
            return answer(session, id: id, error: ProtocolError(.badMessage, "this connection already said hello"))
        }
        guard let version = hello.protocols.filter(Request.supportedProtocols.contains).max() else {
            return answer(session, id: id, error: ProtocolError(.unsupportedProtocol,
                "this hub speaks protocol \(Request.supportedProtocols.map(String.init).joined(separator: ", ")), not \(hello.protocols.map(String.init).joined(separator: ", "))",
                details: ["supported": .array(Request.supportedProtocols.map { .number(JSONNumber($0)) })]))
        }
        if let authenticator = configuration.authenticator {
            if let token = hello.token {
                session.actor = authenticator.actor(token: token)
            }
            session.stopWaitingForToken(metrics)
            guard session.actor != nil else {
                let problem = hello.token == nil ? "this hub needs a token: send it in hello as \"token\"" : "the token is not one this hub knows"
                answer(session, id: id, error: ProtocolError(.unauthorized, problem))
                return emit(.close(session, .policyViolation, "authentication failed"), after: 0)
            }
        } else {
            session.actor = Actor(user: hello.client ?? "anonymous", role: "admin")
        }
        let floor: Int64
        do { floor = try cache.reader.sequenceBounds().floor } catch {
            return answer(session, id: id, error: .storage(error))
        }
        session.saidHello = true
        metrics.clients.add(1, ordering: .relaxed)
        session.since = hello.since
        if let outbox = hello.outbox { setOutbox(outbox, of: session) }
        let retryAfter = self.retryAfter()
        session.client = hello.client
        // Read when answering: a read may catch up on other hubs' commits.
        var head: Int64 { headSeq }
        answer(session, id: id, after: head) { writer in
            writer.int("protocol", Int64(version))
            writer.string("server", configuration.serverName)
            writer.int("seq", head)
            writer.int("floor", floor)
            if let actor = session.actor {
                writer.string("user", actor.user)
                writer.string("role", actor.role)
            }
            if let since = hello.since { writer.bool("resumable", self.canReplay(since: since, floor: floor)) }
            if let retryAfter { writer.int("retryAfterMs", retryAfter) }
        }
    }

    // MARK: get

    private func get(_ target: GetTarget, id: JSONValue?, session: Session, actor: Actor) {
        let head = headSeq
        do throws(ProtocolError) {
            switch target {
            case .record(let name, let path):
                let record = try cache.record(name)
                try policy.check(actor, .read, name: name, owner: record?.owner)
                guard let record else {
                    throw ProtocolError(.notFound, "no record named \"\(name)\"")
                }
                if let path {
                    guard let value = JSONValue.object(record.data).value(at: path) else {
                        throw ProtocolError(.notFound, "\"\(name)\" has no value at \(path)")
                    }
                    answer(session, id: id, after: head) { writer in
                        Self.pathEnvelope(record, path: path, value: value, into: &writer)
                    }
                } else {
                    answer(session, id: id, after: head) { record.envelope(into: &$0) }
                }
            case .list(let name, let cursor, let limit):
                try policy.check(actor, .read, name: name, owner: nil)
                guard let list = try cache.list(name) else { throw ProtocolError(.notFound, "no list named \"\(name)\"") }
                let page = try cache.listPage(name, after: cursor, limit: limit ?? configuration.maxSnapshotEntries)
                answer(session, id: id, after: head) { list.envelope(into: &$0, page: page) }
            case .query(let query, let after, let limit):
                return getQuery(query.restricted(to: actor.user), after: after, limit: limit, id: id, session: session,
                                actor: actor)
            case .prefix(let prefix, let after, let limit):
                let (records, more) = try readableRecords(prefix: prefix, after: after, limit: limit, actor: actor)
                answer(session, id: id, after: head) { writer in
                    writer.int("seq", head)
                    writer.rawArray("records", records.map { $0.envelope() })
                    writer.bool("more", more)
                }
            }
        } catch {
            answer(session, id: id, error: error)
        }
    }

    static func pathEnvelope(_ record: RecordState, path: RecordPath, value: JSONValue?, into writer: inout MessageWriter) {
        writer.string("name", record.name)
        writer.int("version", record.version)
        writer.int("seq", record.seq)
        writer.int("created", record.created)
        writer.int("updated", record.updated)
        writer.string("path", path.description)
        if let value { writer.value("value", value) }
    }

    /// Current records under `prefix` in name order: the store's committed
    /// rows with the cache's newer states laid over them.
    func records(prefix: String, after: String?, limit: Int) throws(ProtocolError) -> ([RecordState], Bool) {
        // One row past the page says whether more follow.
        var stored: [StoredRecord]
        do { stored = try cache.reader.records(prefix: prefix, after: after, limit: limit + 1) } catch { throw .storage(error) }
        // Caught up with another hub's commit: read the page again, until it
        // holds nothing newer than what this hub has applied (another hub
        // may commit between the catch-up and the read). A few times at
        // most: under a stream of commits the page is taken as it is then.
        var rereads = 0
        while rereads < Self.maxRereads, let readsAhead = cache.readsAhead,
              let newest = stored.lazy.map(\.seq).max(), readsAhead(newest) {
            rereads += 1
            do { stored = try cache.reader.records(prefix: prefix, after: after, limit: limit + 1) } catch { throw .storage(error) }
        }
        let storedMore = stored.count > limit
        var result: [RecordState] = []
        result.reserveCapacity(stored.count)
        var seen = Set<ByteKey>()
        for row in stored {
            seen.insert(ByteKey(row.name))
            if let cached = cache.records[ByteKey(row.name)] {
                if let state = cached.state { result.append(state) }
            } else {
                result.append(try RecordState(stored: row))
            }
        }
        let boundary = storedMore ? stored.last?.name : nil
        for name in cache.pendingRecordNames(prefix: prefix) where !seen.contains(ByteKey(name)) {
            if let after, !after.utf8.lexicographicallyPrecedes(name.utf8) { continue }
            if let boundary, !name.utf8.lexicographicallyPrecedes(boundary.utf8) { continue }
            seen.insert(ByteKey(name))
            if let state = cache.records[ByteKey(name)]?.state { result.append(state) }
        }
        result.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        var more = storedMore
        if result.count > limit {
            result.removeLast(result.count - limit)
            more = true
        }
        return (result, more)
    }

    // MARK: subscribe

    private func subscribe(_ target: SubscriptionTarget, since: Int64?, id: JSONValue?, session: Session, actor: Actor) {
        // Read when answering: a read may catch up on other hubs' commits.
        var head: Int64 { headSeq }
        do throws(ProtocolError) {
            try checkSubscribe(target, actor: actor)
            let limit = configuration.maxSubscriptionsPerConnection
            if registry.count(of: session.slot) >= limit, !registry.subscriptions(of: session.slot).contains(target) {
                throw ProtocolError(.tooManySubscriptions,
                                    "this connection already has \(limit) subscriptions, the hub's limit; unsubscribe from some, subscribe to a prefix instead of many names, or raise maxSubscriptions",
                                    details: ["limit": .number(JSONNumber(Int64(limit)))])
            }
            if case .topic = target {
                registry.add(target, slot: session.slot)
                metrics.subscriptions.store(registry.count, ordering: .relaxed)
                return answer(session, id: id) { _ in }
            }
            if case .query(let query) = target {
                return try subscribeQuery(query, since: since, id: id, session: session)
            }
            var replayed: [[UInt8]]?
            if let since { replayed = try replay(target, since: since) }
            let snapshot: ((inout MessageWriter) -> Void)?
            if replayed == nil {
                snapshot = try self.snapshot(of: target)
            } else {
                snapshot = nil
            }
            registry.add(target, slot: session.slot)
            metrics.subscriptions.store(registry.count, ordering: .relaxed)
            answer(session, id: id, after: head) { writer in
                writer.int("seq", head)
                if let replayed {
                    writer.rawArray("changes", replayed)
                } else {
                    snapshot?(&writer)
                    if since != nil { writer.bool("resnapshot", true) }
                }
            }
        } catch {
            answer(session, id: id, error: error)
        }
    }

    /// Writes the snapshot members of a subscribe reply.
    private func snapshot(of target: SubscriptionTarget) throws(ProtocolError) -> (inout MessageWriter) -> Void {
        switch target {
        case .record(let name):
            let record = try cache.record(name)
            return { writer in
                if let record { writer.raw("record", record.envelope()) } else { writer.null("record") }
            }
        case .path(let name, let path):
            let record = try cache.record(name)
            return { writer in
                guard let record else { return writer.null("record") }
                var inner = MessageWriter()
                Self.pathEnvelope(record, path: path, value: JSONValue.object(record.data).value(at: path), into: &inner)
                writer.raw("record", inner.finish())
            }
        case .list(let name):
            let list = try cache.list(name)
            let page = list == nil ? nil : try cache.listPage(name, after: nil, limit: configuration.maxSnapshotEntries)
            return { writer in
                if let list, let page { writer.raw("list", list.envelope(page: page)) } else { writer.null("list") }
            }
        case .prefix(let prefix):
            let (records, more) = try records(prefix: prefix, after: nil, limit: configuration.maxSnapshotRecords)
            return { writer in
                writer.rawArray("records", records.map { $0.envelope() })
                writer.bool("more", more)
            }
        case .topic, .query:
            return { _ in }
        }
    }

    /// The pushes `target` missed since `since`, or nil when the log no
    /// longer reaches back that far (or the gap is too long to replay).
    private func replay(_ target: SubscriptionTarget, since: Int64) throws(ProtocolError) -> [[UInt8]]? {
        let floor: Int64
        do { floor = try cache.reader.sequenceBounds().floor } catch { throw .storage(error) }
        guard canReplay(since: since, floor: floor) else { return nil }
        let limit = configuration.maxReplayChanges + 1
        var stored: [StoredChange]
        do {
            switch target {
            case .record(let name), .path(let name, _):
                stored = try cache.reader.changes(after: since, kind: .record, name: name, limit: limit)
            case .list(let name):
                stored = try cache.reader.changes(after: since, kind: .list, name: name, limit: limit)
            case .prefix(let prefix):
                stored = try cache.reader.changes(after: since, prefix: prefix, limit: limit)
            case .topic, .query:
                stored = []
            }
        } catch {
            throw .storage(error)
        }
        guard stored.count < limit else { return nil }
        // A shared store may hold other hubs' changes this hub has not
        // applied yet: they reach the subscriber as pushes once it has.
        if shared != nil { stored = Array(stored.prefix { $0.seq <= committedSeq }) }
        var pushes: [[UInt8]] = []
        var last = since
        if case .path(let name, let path) = target {
            // Read some history before `since` too, so the value under the
            // path is known when the first missed change arrives.
            let start = max(floor, since - configuration.pathReplayLookback)
            do {
                stored = try cache.reader.changes(after: start, kind: .record, name: name, limit: limit)
            } catch {
                throw .storage(error)
            }
            guard stored.count < limit else { return nil }
            if shared != nil { stored = Array(stored.prefix { $0.seq <= committedSeq }) }
            var filter = PathReplay(path: path, logIsComplete: start == 0)
            for change in stored {
                // The hub wrote these bytes: read them without message limits.
                // One that still does not parse is delivered, and the filter
                // forgets what it knew.
                let parsed = try? JSONValue.parse(change.message, limits: .stored)
                let concerned = filter.concerns(parsed?.objectValue ?? [:])
                if change.seq > since {
                    last = max(last, change.seq)
                    if concerned { pushes.append(change.message) }
                }
            }
            last = max(last, stored.last?.seq ?? since)
        } else {
            for change in stored {
                last = max(last, change.seq)
                pushes.append(change.message)
            }
        }
        for change in uncommitted where change.seq > last && Self.matches(target, change) {
            pushes.append(change.push)
        }
        guard pushes.count < limit else { return nil }
        return pushes
    }

    /// Whether a resume from `since` can be answered from the log: it is
    /// retained that far back and not so far that the scan would stall the core.
    func canReplay(since: Int64, floor: Int64) -> Bool {
        since >= floor && since <= headSeq && headSeq - since <= configuration.maxReplayScan
    }

    /// Whether a pending change concerns `target`.
    static func matches(_ target: SubscriptionTarget, _ change: Change) -> Bool {
        switch (target, change.target) {
        case (.list(let name), .list): return name.sameBytes(as: change.name)
        case (.path(let name, let path), .record(let before, let after, let scope)):
            return name.sameBytes(as: change.name) && SubscriptionRegistry.concerns(path: path, before: before, after: after, scope: scope)
        case (_, .record): return SubscriptionRegistry.matches(target, recordNamed: change.name)
        case (_, .list): return false
        }
    }

    // MARK: writes

    struct WriteResult {
        var seq: Int64
        var reply: JSONObject
        var changes: [Change]
    }

    /// Applies writes (idempotently when keyed), queues their store unit and
    /// pushes. The caller answers after `seq` is committed.
    func write(_ writes: [Write], atomic: Bool, key clientKey: String?, actor: Actor) -> Result<WriteResult, ProtocolError> {
        // With users, keys are each user's own: another user's key neither
        // replays that user's answer nor blocks a write.
        let key = clientKey.map { configuration.authenticator == nil ? $0 : "\(actor.user)\u{1F}\($0)" }
        if let key {
            switch priorReply(for: key) {
            case .success(let prior?):
                // Answered by another hub's commit this hub has not applied yet.
                catchUpIfBehind(since: prior.seq)
                return .success(WriteResult(seq: prior.seq, reply: prior.reply, changes: []))
            case .success(nil): break
            case .failure(let error): return .failure(error)
            }
        }
        let now = configuration.clock()
        let changes: [Change]
        let plan: WorkflowPlan
        do throws(ProtocolError) {
            for workflow in configuration.planner.workflows(touchedBy: writes) { _ = try stats(of: workflow) }
            plan = try configuration.planner.plan(writes, atomic: atomic, actor: actor, state: &cache, now: now,
                                                  stats: workflowStats)
            changes = try engine.apply(plan.writes, atomic: atomic, origins: plan.origins, to: &cache,
                                       firstSeq: headSeq + 1, now: now)
        } catch {
            return .failure(redacted(error, for: actor))
        }
        let last = changes.last!.seq
        for (prefix, delta) in plan.deltas {
            if shared == nil {
                workflowStats[prefix]?.apply(delta)
            } else if let inverse = workflowStats[prefix]?.applyUndoably(delta) {
                statsUndo.append((last, prefix, inverse))
            }
        }
        headSeq = last
        metrics.headSeq.store(Int(last), ordering: .relaxed)
        metrics.changes.add(changes.count, ordering: .relaxed)
        // Each client write answers with its own change's reply; what the
        // hub added (stats, stock, lists) is pushed but not echoed.
        func result(_ index: Int) -> JSONValue {
            var reply = changes[plan.primaries[index]].reply
            for (key, value) in plan.replyExtras[index] ?? [:] { reply[key] = value }
            // An increment answers with the new value: not for a caller
            // that may write the record but not read it.
            if reply["value"] != nil, !mayRead(actor, name: changes[plan.primaries[index]].name) { reply["value"] = nil }
            return .object(reply)
        }
        var reply: JSONObject
        if atomic {
            reply = ["seq": .number(JSONNumber(last)), "results": .array(writes.indices.map(result))]
        } else {
            reply = result(0).objectValue!
        }
        var mutations: [StoreMutation] = []
        var stored: [StoredChange] = []
        mutations.reserveCapacity(changes.count)
        stored.reserveCapacity(changes.count)
        for change in changes {
            cache.apply(change)
            uncommitted.append(change)
            codeMutations(of: change, into: &mutations)
            wordMutations(of: change, into: &mutations)
            if !recordIndexes.isEmpty { indexMutations(of: change, into: &mutations) }
            switch change.target {
            case .record(let before, let after, _):
                mutations.append(after.map { .putRecord($0.stored) } ?? .deleteRecord(change.name))
                // Other hubs on a shared store replay the change against it.
                stored.append(StoredChange(seq: change.seq, time: now, kind: .record, name: change.name, message: change.push,
                                           prior: shared == nil ? nil : before?.stored))
            case .list(_, let after, let edit):
                mutations.append(after.map { .putList($0.stored) } ?? .deleteList(change.name))
                Self.mutations(of: edit, list: change.name, into: &mutations)
                stored.append(StoredChange(seq: change.seq, time: now, kind: .list, name: change.name, message: change.push))
            }
        }
        var idempotency: StoredIdempotency?
        if let key {
            let bytes = JSONValue.object(reply).serialized()
            recentKeys[ByteKey(key)] = (last, bytes)
            idempotency = StoredIdempotency(key: key, seq: last, time: now, response: bytes)
        }
        emitUnit(StoreUnit(mutations: mutations, changes: stored, idempotency: idempotency, token: UInt64(last)))
        if intakeAnalyzer != nil { noteIntakeUploads(changes) }
        return .success(WriteResult(seq: last, reply: reply, changes: changes))
    }

    /// Pushes of `changes`, queued after their replies by the caller.
    func fanOut(_ changes: [Change]) {
        for change in changes {
            slotScratch.removeAll(keepingCapacity: true)
            registry.subscribers(of: change, into: &slotScratch)
            guard !slotScratch.isEmpty else { continue }
            let targets = slotScratch.compactMap { sessions[$0] }
            emit(.fanout(SharedFrame(.text, change.push), targets, isEvent: false), after: change.seq)
        }
        if !liveQueries.isEmpty {
            for change in changes { queryPushes(for: change) }
        }
    }

    private func priorReply(for key: String) -> Result<(seq: Int64, reply: JSONObject)?, ProtocolError> {
        var found = recentKeys[ByteKey(key)]
        if found == nil {
            do {
                if let row = try cache.reader.idempotency(key) { found = (row.seq, row.response) }
            } catch {
                return .failure(.storage(error))
            }
        }
        guard let found else { return .success(nil) }
        guard case .object(let reply)? = try? JSONValue.parse(found.reply) else {
            return .failure(ProtocolError(.storageFailed, "the stored reply for idempotency key \"\(key)\" is damaged"))
        }
        return .success((found.seq, reply))
    }

    // MARK: events

    /// Sends an event to the topic's subscribers; `replyFirst` queues the
    /// publisher's answer ahead of the deliveries. Returns the count.
    @discardableResult
    func publish(topic: String, data: JSONValue, replyFirst: (Int) -> Void) -> Int {
        let slots = registry.subscribers(ofTopic: topic)
        replyFirst(slots.count)
        metrics.events.add(1, ordering: .relaxed)
        guard !slots.isEmpty else { return 0 }
        var writer = MessageWriter()
        writer.string("op", "event")
        writer.string("topic", topic)
        writer.value("data", data)
        let targets = slots.compactMap { sessions[$0] }
        emit(.fanout(SharedFrame(.text, writer.finish()), targets, isEvent: true), after: 0)
        return slots.count
    }
}
