import TallyProtocol

/// Subscriptions: sending them (again after every reconnect, with `since`),
/// taking their replies (changes, snapshots, paged snapshots) and keeping
/// each one's resume point. Queue-confined like the rest of the core.
extension ClientCore {
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

    func sendSubscribe(_ sub: SubscriptionState) {
        sub.reset()
        sub.status = .awaitingReply
        var message: JSONObject = ["op": "subscribe"]
        for (key, value) in sub.target.members { message[key] = value }
        if let cursor = sub.cursor { message["since"] = .int(cursor) }
        let (id, generation) = (sub.id, self.generation)
        transmit(message) { [weak self] result in self?.subscribed(id, result, generation: generation) }
    }

    func subscribed(_ id: Int, _ result: Result<JSONObject, ProtocolError>, generation: Int) {
        guard generation == self.generation, let sub = subscriptions[id], sub.status == .awaitingReply else { return }
        let reply: JSONObject
        switch result {
        case .failure(let error):
            if error.isHubRetryable { return lost("the hub could not answer the subscription to \(sub.target.key): \(error)") }
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
        if case .query = sub.target {
            sub.queryID = reply["query"]?.int64
            if reply["delta"] == .bool(true) {
                guard dispatch(sub, .queryChange(QueryChange(seq: seq, json: reply, isDelta: true))) else { return }
                sub.cursor = max(seq, lastPushSeq)
                sub.status = .ready
                return checkSynced()
            }
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
        if case .object(let list)? = reply["list"] {
            snapshot.list = ListEnvelope(json: list)
            if list["more"] == .bool(true), let cursor = list["cursor"]?.stringValue {
                // Page the rest; pushes meanwhile go to the entries loaded so far.
                sub.status = .paging
                sub.snapshot = snapshot
                sub.listPages = ListPages(list: snapshot.list, cursor: cursor, seq: seq)
                return fetchListPage(sub)
            }
        }
        if reply["more"] == .bool(true), let pageTarget = sub.target.pageTarget {
            // Page the rest; pushes for the prefix wait in the buffer.
            sub.status = .paging
            sub.snapshot = snapshot
            for record in snapshot.records { sub.pages[record.name] = record }
            progressHandler?(.receiving(target: sub.target, records: sub.pages.count))
            return fetchPage(sub, target: pageTarget, after: snapshot.records.last?.name)
        }
        finishSnapshot(sub, snapshot)
    }

    /// `target`: the `get` members that page it (`prefix`, or `query`).
    func fetchPage(_ sub: SubscriptionState, target: JSONObject, after: String?) {
        let prefix = sub.target.key
        var message: JSONObject = ["op": "get", "limit": 1000]
        for (key, value) in target { message[key] = value }
        if let after { message["after"] = .string(after) }
        let (id, generation) = (sub.id, self.generation)
        transmit(message) { [weak self] result in
            guard let self, generation == self.generation, let sub = self.subscriptions[id], sub.status == .paging else { return }
            switch result {
            case .failure(let error):
                if !error.isTransient || error.isHubRetryable { self.lost("cannot page \(prefix): \(error)") }
            case .success(let reply):
                let records = (reply["records"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RecordEnvelope.init(json:)) }
                // A page read after the snapshot may hold newer records: keep the newer one.
                for record in records where (sub.pages[record.name]?.seq ?? -1) < record.seq {
                    sub.pages[record.name] = record
                }
                self.progressHandler?(.receiving(target: sub.target, records: sub.pages.count))
                if reply["more"] == .bool(true), let last = records.last {
                    self.fetchPage(sub, target: target, after: last.name)
                } else if var snapshot = sub.snapshot {
                    snapshot.records = sub.pages.values.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
                    self.finishSnapshot(sub, snapshot)
                }
            }
        }
    }

    func fetchListPage(_ sub: SubscriptionState) {
        guard case .list(let name) = sub.target, let paging = sub.listPages, var snapshot = sub.snapshot else { return }
        guard let cursor = paging.cursor else {
            // Loaded (or replaced by a setEntries, or deleted, meanwhile).
            snapshot.list = paging.list
            snapshot.seq = max(snapshot.seq, paging.seq)
            sub.listPages = nil
            return finishSnapshot(sub, snapshot)
        }
        let (id, generation) = (sub.id, self.generation)
        let restart = paging.restart
        var message: JSONObject = ["op": "get", "list": .string(name)]
        if !restart { message["cursor"] = .string(cursor) }
        transmit(message) { [weak self] result in
            guard let self, generation == self.generation, let sub = self.subscriptions[id], sub.status == .paging,
                  sub.listPages != nil else { return }
            switch result {
            case .failure(let error):
                // A list deleted meanwhile has no next page: its delete push ended the paging.
                if sub.listPages?.cursor == nil { return self.fetchListPage(sub) }
                if !error.isTransient || error.isHubRetryable { self.lost("cannot page list \(name): \(error)") }
            case .success(let reply):
                let more = reply["more"] == .bool(true) ? reply["cursor"]?.stringValue : nil
                if restart, sub.listPages?.cursor != nil, let first = ListEnvelope(json: reply) {
                    // From the first page again: it holds every push before it.
                    sub.listPages = ListPages(list: first, cursor: more, seq: sub.listPages?.seq ?? 0)
                } else if sub.listPages?.cursor == cursor, sub.listPages?.restart == false {
                    sub.listPages?.list?.entries += (reply["entries"]?.arrayValue ?? []).compactMap(\.stringValue)
                    sub.listPages?.cursor = more
                }
                // Else a setEntries or delete pushed meanwhile replaced everything, or this page
                // may have missed an entry (restart): it is dropped.
                self.progressHandler?(.receiving(target: sub.target, records: sub.listPages?.list?.entries.count ?? 0))
                self.fetchListPage(sub)
            }
        }
    }

    /// Delivers a complete snapshot, then the pushes that arrived while it
    /// was paged (minus those the pages already reflect).
    func finishSnapshot(_ sub: SubscriptionState, _ snapshot: Snapshot) {
        let pages = sub.pages
        let buffered = sub.buffer.filter { change in
            guard let held = pages[change.name], !change.isList else { return true }
            return change.seq > held.seq
        }
        let queryChanges = sub.queryBuffer.filter { $0.seq > snapshot.seq }
        sub.snapshot = nil
        sub.pages = [:]
        sub.buffer = []
        sub.queryBuffer = []
        guard dispatch(sub, .snapshot(snapshot)) else { return }
        let through = max(snapshot.seq, lastPushSeq)
        if !buffered.isEmpty {
            guard dispatch(sub, .changes(buffered, through: through)) else { return }
        }
        for change in queryChanges {
            guard dispatch(sub, .queryChange(change)) else { return }
        }
        sub.cursor = through
        sub.status = .ready
        checkSynced()
    }
}
