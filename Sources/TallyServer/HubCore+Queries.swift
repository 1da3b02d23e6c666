import TallyEngine
import TallyNet
import TallyProtocol
import TallyStore

/// A live query with at least one subscriber: the id its pushes carry, and,
/// for a limited query, its members.
struct LiveQueryState {
    let id: Int64
    var result: LimitedResult?
}

/// Live queries (PROTOCOL.md, "Live queries") and the record indexes they
/// read: a query's snapshot and pushes cost what its result holds, never
/// what its prefix holds.
extension HubCore {
    // MARK: Indexes

    /// The index rows a record change moves (appended to its store unit).
    func indexMutations(of change: Change, into mutations: inout [StoreMutation]) {
        guard case .record(let before, let after, _) = change.target else { return }
        for index in recordIndexes where index.covers(change.name) {
            let old = before.flatMap(index.value(of:))
            let new = after.flatMap(index.value(of:))
            if let old, old != new {
                mutations.append(.deleteIndexEntry(index: index.id, value: old, name: change.name))
            }
            if let new, let after {
                mutations.append(.putIndexEntry(StoredIndexEntry(index: index.id, value: new, name: change.name,
                                                                 updated: after.updated)))
            }
        }
    }

    /// Builds, before the store starts, each index the store does not hold
    /// yet (the configured ones and resolve's code index: one pass over its
    /// prefix, once), and drops the rows of indexes no longer configured.
    /// Nothing to do on an ordinary start.
    static func prepareIndexes(_ indexes: [RecordIndex], store: any Store, reader: any StoreReading,
                               logger: Logger) throws(StoreError) {
        let built = Set(try reader.builtIndexes())
        for id in built where id != codeIndexID && id != wordIndexID && !indexes.contains(where: { $0.id == id }) {
            try store.applyBeforeStart([StoreUnit(mutations: [.dropIndex(id)], token: 0)])
            logger.info("index.dropped", ["index": String(id.map { $0 == "\u{1F}" ? " " : $0 })])
        }
        for index in indexes where !built.contains(index.id) {
            let count = try buildIndex(index.id, prefix: index.prefix, store: store, reader: reader) { record in
                index.value(of: record).map { [$0] } ?? []
            }
            logger.info("index.built", ["prefix": index.prefix, "path": index.path.description, "records": String(count)])
        }
        if !built.contains(codeIndexID) {
            let count = try buildIndex(codeIndexID, prefix: itemPrefix, store: store, reader: reader) { record in
                codes(of: record).map { Array($0.utf8) }
            }
            logger.info("index.built", ["prefix": itemPrefix, "path": "(item codes)", "records": String(count)])
        }
        if !built.contains(wordIndexID) {
            let count = try buildIndex(wordIndexID, prefix: itemPrefix, store: store, reader: reader) { record in
                wordKeys(of: record).map { Array($0.utf8) }
            }
            logger.info("index.built", ["prefix": itemPrefix, "path": "(item name words)", "records": String(count)])
        }
    }

    /// Writes index `id`'s rows for every record under `prefix`, 1,000
    /// records per unit, then marks it built; the records read.
    private static func buildIndex(_ id: String, prefix: String, store: any Store, reader: any StoreReading,
                                   values: (RecordState) -> [[UInt8]]) throws(StoreError) -> Int {
        var after: String?
        var count = 0
        while true {
            let page = try reader.records(prefix: prefix, after: after, limit: 1000)
            var mutations: [StoreMutation] = []
            for row in page {
                // A record the hub cannot parse is not indexed (and
                // cannot be read either); the build goes on.
                guard let record = try? RecordState(stored: row) else { continue }
                for value in values(record) {
                    mutations.append(.putIndexEntry(StoredIndexEntry(index: id, value: value, name: row.name,
                                                                     updated: row.updated)))
                }
            }
            count += page.count
            let last = page.count < 1000
            if last { mutations.append(.markIndexBuilt(id)) }
            try store.applyBeforeStart([StoreUnit(mutations: mutations, token: 0)])
            if last { return count }
            after = page.last?.name
        }
    }

    // MARK: Access and planning

    /// The target as the hub keeps it: a query asking for one's own records
    /// names its owner.
    func normalized(_ target: SubscriptionTarget, actor: Actor) -> SubscriptionTarget {
        if case .query(let query) = target { return .query(query.restricted(to: actor.user)) }
        return target
    }

    /// A query needs `permission` on its whole prefix, or on one's own
    /// records there and a query restricted to them.
    func checkQuery(_ query: Query, _ permission: Permission, actor: Actor) throws(ProtocolError) {
        switch policy.decide(actor, permission, query: query.prefix) {
        case .allowed:
            return
        case .ifOwner:
            guard query.isRestricted(to: actor.user) else {
                var error = AccessPolicy.denied(actor, permission, name: query.prefix, ownOnly: true)
                error.message += "; add \"own\": true to the query to ask for your own records"
                throw error
            }
        case .denied:
            throw AccessPolicy.denied(actor, permission, name: query.prefix)
        }
    }

    /// The index that answers `query`, and the values to read from it. A
    /// condition other than `owner` is preferred: the open orders are few,
    /// while one requester's orders grow with history.
    func plan(_ query: Query) throws(ProtocolError) -> (index: RecordIndex, values: [[UInt8]]) {
        var chosen: (index: RecordIndex, values: [[UInt8]])?
        for index in recordIndexes {
            guard let values = index.values(for: query) else { continue }
            if chosen == nil || chosen!.index.path.description == "owner" { chosen = (index, values) }
        }
        guard let chosen else {
            let known = recordIndexes.map { "\($0.path) under \"\($0.prefix)\"" }.joined(separator: ", ")
            throw ProtocolError(.badField,
                                "no index answers this query; ask on an indexed path (\(known.isEmpty ? "none configured" : known)), or add an index to the config's \"indexes\"",
                                details: ["field": .string("query.where")])
        }
        return chosen
    }

    /// The query's result as it is now: a limited query's members in result
    /// order, or an unlimited query's page in name order (names > `after`,
    /// at most `pageLimit`, and whether more follow). Committed index rows
    /// with the uncommitted records laid over them; every candidate is
    /// checked against its current state.
    func queryRecords(_ query: Query, after: String?, pageLimit: Int) throws(ProtocolError) -> ([RecordState], Bool) {
        let (index, values) = try plan(query)
        var names: [String] = []
        var boundary: String?
        var more = false
        do {
            if let limit = query.limit {
                // Uncommitted records may have left the stored first `limit`:
                // read as many more.
                let wanted = limit + cache.pendingRecordCount
                for value in values {
                    names += try cache.reader.indexedNamesByUpdate(index: index.id, value: value, prefix: query.prefix,
                                                                   newestFirst: query.order == .newestFirst, limit: wanted)
                }
            } else {
                for value in values {
                    let page = try cache.reader.indexedNames(index: index.id, value: value, prefix: query.prefix,
                                                             after: after, limit: pageLimit + 1)
                    if page.count > pageLimit, let last = page.last {
                        more = true
                        // Beyond the least last name of a cut page, names
                        // are not all known: stop there.
                        if boundary == nil || last.utf8.lexicographicallyPrecedes(boundary!.utf8) { boundary = last }
                    }
                    names += page
                }
            }
        } catch {
            throw .storage(error)
        }
        names += cache.pendingRecordNames(prefix: query.prefix)
        var seen = Set<ByteKey>()
        var records: [RecordState] = []
        for name in names where seen.insert(ByteKey(name)).inserted {
            if query.limit == nil {
                if let after, !after.utf8.lexicographicallyPrecedes(name.utf8) { continue }
                if let boundary, boundary.utf8.lexicographicallyPrecedes(name.utf8) { continue }
            }
            guard let record = try cache.record(name), query.matches(record.data) else { continue }
            records.append(record)
        }
        if let limit = query.limit {
            let order = LimitedResult(limit: limit, newestFirst: query.order == .newestFirst, records: records)
            let byName = Dictionary(records.map { (ByteKey($0.name), $0) }, uniquingKeysWith: { a, _ in a })
            return (order.members.compactMap { byName[ByteKey($0.name)] }, false)
        }
        records.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        if records.count > pageLimit {
            records.removeLast(records.count - pageLimit)
            more = true
        }
        return (records, more)
    }

    // MARK: Requests

    /// `get` of a query: a page of an unlimited query, the whole result of
    /// a limited one.
    func getQuery(_ query: Query, after: String?, limit: Int, id: JSONValue?, session: Session, actor: Actor) {
        // Read when answering: a read may catch up on other hubs' commits.
        var head: Int64 { headSeq }
        do throws(ProtocolError) {
            try checkQuery(query, .read, actor: actor)
            let (records, more) = try queryRecords(query, after: after, pageLimit: limit)
            answer(session, id: id, after: head) { writer in
                writer.int("seq", head)
                writer.rawArray("records", records.map { $0.envelope() })
                writer.bool("more", more)
            }
        } catch {
            answer(session, id: id, error: error)
        }
    }

    /// Subscribes to a query: the reply carries the query's id (which its
    /// pushes carry) and the result, or its first page.
    ///
    /// A resume (`since`) of an unlimited query answers what changed since
    /// from the log (`delta`: the records changed since that are in the
    /// result now, the names changed since that are not), so it costs the
    /// changes missed, not the result; when the log no longer reaches back,
    /// the result with `resnapshot`. A limited query answers its whole
    /// result (at most `limit` records), which replaces what the client held.
    func subscribeQuery(_ query: Query, since: Int64?, id: JSONValue?, session: Session) throws(ProtocolError) {
        // Read when answering: a read may catch up on other hubs' commits.
        var head: Int64 { headSeq }
        let delta = query.limit == nil ? try since.flatMap { since throws(ProtocolError) in try queryDelta(query, since: since) } : nil
        var records: [RecordState] = []
        var more = false
        if delta == nil { (records, more) = try queryRecords(query, after: nil, pageLimit: configuration.maxSnapshotRecords) }
        registry.add(.query(query), slot: session.slot)
        metrics.subscriptions.store(registry.count, ordering: .relaxed)
        var state = liveQueries[query] ?? LiveQueryState(id: nextQueryID, result: nil)
        if state.id == nextQueryID { nextQueryID += 1 }
        if let limit = query.limit, state.result == nil {
            state.result = LimitedResult(limit: limit, newestFirst: query.order == .newestFirst, records: records)
        }
        liveQueries[query] = state
        answer(session, id: id, after: head) { writer in
            writer.int("seq", head)
            writer.int("query", state.id)
            if let delta {
                writer.bool("delta", true)
                writer.rawArray("records", delta.records.map { $0.envelope() })
                writer.value("left", .array(delta.left.map(JSONValue.string)))
                writer.bool("more", false)
            } else {
                writer.rawArray("records", records.map { $0.envelope() })
                writer.bool("more", more)
                if since != nil, query.limit == nil { writer.bool("resnapshot", true) }
            }
        }
    }

    /// What changed under the query's prefix since `since`, as it stands
    /// now: the changed records in the result, the changed names not in it.
    /// Nil when the log cannot answer (see `canReplay`, `maxReplayChanges`).
    func queryDelta(_ query: Query, since: Int64) throws(ProtocolError) -> (records: [RecordState], left: [String])? {
        let floor: Int64
        do { floor = try cache.reader.sequenceBounds().floor } catch { throw .storage(error) }
        guard canReplay(since: since, floor: floor) else { return nil }
        let limit = configuration.maxReplayChanges + 1
        var stored: [StoredChange]
        do { stored = try cache.reader.changes(after: since, prefix: query.prefix, limit: limit) } catch { throw .storage(error) }
        guard stored.count < limit else { return nil }
        if shared != nil { stored = Array(stored.prefix { $0.seq <= committedSeq }) }
        var names = stored.map(\.name)
        let last = stored.last?.seq ?? since
        for change in uncommitted where change.seq > last {
            if case .record = change.target, change.name.hasBytePrefix(query.prefix) { names.append(change.name) }
        }
        var seen = Set<ByteKey>()
        var records: [RecordState] = []
        var left: [String] = []
        for name in names where seen.insert(ByteKey(name)).inserted {
            if let record = try cache.record(name), query.matches(record.data) {
                records.append(record)
            } else {
                left.append(name)
            }
        }
        guard records.count + left.count < limit else { return nil }
        return (records, left)
    }

    /// Forgets the state of queries nobody subscribes to any more.
    func dropUnusedQueries(_ targets: some Sequence<SubscriptionTarget>) {
        for case .query(let query) in targets where registry.subscribers(ofQuery: query).isEmpty {
            liveQueries[query] = nil
        }
    }

    // MARK: Pushes

    /// What `change` does to each live query over its name: one
    /// `{"op":"query",…}` message per query it concerns, shared by that
    /// query's subscribers, after the change's seq.
    func queryPushes(for change: Change) {
        guard case .record(let before, let after, _) = change.target else { return }
        for query in registry.queries(concerning: change.name) {
            guard var state = liveQueries[query] else { continue }
            let matchesNow = after.map { query.matches($0.data) } ?? false
            var entered: [RecordState] = []
            var changed: [RecordState] = []
            var left: [String] = []
            if let previous = state.result {
                var result = previous
                switch result.apply(name: change.name, updated: matchesNow ? after?.updated : nil) {
                case .none: break
                case .entered(let evicted):
                    entered = after.map { [$0] } ?? []
                    if let evicted { left = [evicted] }
                case .changed: changed = after.map { [$0] } ?? []
                case .left: left = [change.name]
                case .reread:
                    do {
                        let (fresh, _) = try queryRecords(query, after: nil, pageLimit: previous.limit)
                        result = previous
                        left = result.replace(with: fresh)
                        for record in fresh {
                            if !previous.contains(record.name) {
                                entered.append(record)
                            } else if record.name.sameBytes(as: change.name) {
                                changed.append(record)
                            }
                        }
                    } catch {
                        // The store cannot be read: the members stay as the
                        // change left them, and the next change reads again.
                        logger.warning("query.reread_failed", ["query": query.description, "reason": error.message])
                    }
                }
                state.result = result
                liveQueries[query] = state
            } else {
                let matchedBefore = before.map { query.matches($0.data) } ?? false
                if matchesNow, let after {
                    if matchedBefore { changed = [after] } else { entered = [after] }
                } else if matchedBefore {
                    left = [change.name]
                }
            }
            guard !entered.isEmpty || !changed.isEmpty || !left.isEmpty else { continue }
            var writer = MessageWriter()
            writer.string("op", "query")
            writer.int("query", state.id)
            writer.int("seq", change.seq)
            writer.int("time", change.time)
            if !entered.isEmpty { writer.rawArray("entered", entered.map { $0.envelope() }) }
            if !changed.isEmpty { writer.rawArray("changed", changed.map { $0.envelope() }) }
            if !left.isEmpty { writer.value("left", .array(left.map(JSONValue.string))) }
            let targets = registry.subscribers(ofQuery: query).compactMap { sessions[$0] }
            emit(.fanout(SharedFrame(.text, writer.finish()), targets, isEvent: false), after: change.seq)
        }
    }

    /// After a failed commit the uncommitted changes are gone: limited
    /// queries read their members again from what the store holds.
    func rereadLimitedQueries() {
        for (query, state) in liveQueries {
            guard var result = state.result else { continue }
            guard let (fresh, _) = try? queryRecords(query, after: nil, pageLimit: result.limit) else { continue }
            _ = result.replace(with: fresh)
            liveQueries[query]?.result = result
        }
    }
}
