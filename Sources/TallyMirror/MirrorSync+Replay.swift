import Dispatch
import TallyClient
import TallyProtocol
import TallySQLite

/// Replaying the outbox through the shared `OutboxReplay` (order, window,
/// one write per record in flight, stale replies, what a failure means):
/// sending entries, confirming them in batches, merging on `conflict`,
/// setting aside what the hub refuses for good.
extension MirrorSync {
    // MARK: Replaying the outbox

    /// Sends what may go now: outbox order, one write per record in flight.
    func pump() {
        guard live, !stopped else { return }
        if replay.queued.isEmpty {
            do {
                replay.enqueue(try store.pendingEntries(after: replay.newestID, limit: 1000))
            } catch {
                return fail("cannot read the outbox: \(error)")
            }
        }
        for entry in replay.takeSendable() { send(entry) }
    }

    /// Sends an entry the replay has in flight, with its idempotency key.
    func send(_ entry: OutboxEntry) {
        let (id, epoch) = (entry.id, replay.epoch)
        client.sendIfLive(entry.message) { [self] result in replied(id, epoch: epoch, result) }
    }

    func replied(_ id: Int64, epoch: Int, _ result: Result<JSONObject, ProtocolError>) {
        guard !stopped, var entry = replay.inflight(id, epoch: epoch) else { return }
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
        case .failure(let error) where ReplayFailure(error) == .keep:
            retryLater(entry, error)
        case .failure(let error):
            refused(entry, error)
        }
    }

    func nextStep(_ entry: inout OutboxEntry) {
        entry.step += 1
        do {
            try store.db.query("UPDATE outbox SET step = ? WHERE id = ?", [.int(Int64(entry.step)), .int(entry.id)])
        } catch {
            return fail("cannot record progress of outbox entry \(entry.id): \(error)")
        }
        replay.resend(entry)
        send(entry)
    }

    func finish(_ entry: OutboxEntry, _ result: WriteResult?) {
        replay.settle(entry.id)
        completed.append((entry, result))
        replayed(entry)
        // The hub applied exactly this write on exactly its base: the next
        // writes to the record were made on top of it, so their base is the new version.
        if let next = Self.baseAfter(entry, result) {
            replay.updateQueued { queued in
                if queued.name == entry.name, queued.plan == nil, queued.baseVersion == entry.baseVersion {
                    queued.baseVersion = next
                }
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
    func flushCompleted() {
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

    func covered(_ name: String) -> Bool {
        targets.contains { target in
            switch target.target {
            case .prefix(let prefix): name.hasBytePrefix(prefix)
            case .record(let record): record == name
            default: false
            }
        }
    }

    func retryLater(_ entry: OutboxEntry, _ error: ProtocolError) {
        var entry = entry
        entry.attempts += 1
        entry.lastError = error.message
        replay.putBack(entry)
        if error.code != .disconnected {
            _ = try? store.db.query("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                                [.text("\(error.message) (\(error.code))"), .int(entry.id)])
            queue.asyncAfter(deadline: .now() + .seconds(1)) { [self] in pump() }
        }
    }

    /// The hub refused the write for good: the entry is kept as failed (see
    /// `tally mirror status`) and the local copy drops its effect.
    func refused(_ entry: OutboxEntry, _ error: ProtocolError) {
        replay.settle(entry.id)
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
        replayed(entry)
        pump()
    }

    /// Recomputes a record's local view from its hub copy and pending writes.
    func refreshView(_ name: String) throws(MirrorStoreError) {
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

    func conflicted(_ entry: OutboxEntry, _ error: ProtocolError) {
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

    func merge(_ entry: OutboxEntry, hub: JSONObject?, hubVersion: Int64) {
        let policy = configuration.policies.policy(for: entry.name)
        let outcome = ThreeWayMerge.merge(name: entry.name, op: entry.op, base: entry.base, hub: hub, hubVersion: hubVersion,
                                          rule: catalog.rule(for: entry.name), policy: policy)
        rewrite(entry, steps: outcome.steps, conflicts: outcome.conflicts, policy: policy)
    }

    /// The hub's current copy, for a conflict reply that did not carry it.
    func fetchHubCopy(_ entry: OutboxEntry, _ then: @escaping @Sendable (JSONObject?, Int64) -> Void) {
        let epoch = replay.epoch
        client.sendIfLive(["op": "get", "name": .string(entry.name)]) { [self] result in
            guard !stopped, replay.inflight(entry.id, epoch: epoch) != nil else { return }
            switch result {
            case .success(let reply): then(reply["data"]?.objectValue, reply["version"]?.int64 ?? 0)
            case .failure(let error) where error.code == .notFound: then(nil, 0)
            case .failure(let error) where ReplayFailure(error) == .keep: retryLater(entry, error)
            case .failure(let error): refused(entry, error)
            }
        }
    }

    /// Replaces an entry's write by the merge's writes (stored first, with
    /// any conflicts, in one transaction), then sends them.
    func rewrite(_ entry: OutboxEntry, steps: [JSONObject], conflicts: [FieldConflict], policy: MergePolicy = .hub) {
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
        replay.resend(entry)
        send(entry)
    }

    /// The same entry and field always name the same conflict, so a merge
    /// done again after a crash records it once.
    static func conflictID(_ idem: String, _ field: String) -> String {
        hashHex("\(idem)|\(field)", digits: 16)
    }
}

/// An outbox entry replays in outbox order, one per record in flight.
extension OutboxEntry: OutboxReplayable {
    public var replayID: Int64 { id }
    public var replayLane: String { name }
}
