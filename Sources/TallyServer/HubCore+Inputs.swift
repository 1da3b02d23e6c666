import TallyEngine
import TallyProtocol
import TallyStore

/// What the core does with each input of a batch (`HubCore.process`): a
/// request, a connection opening or closing, a commit report, a write or
/// read from inside the hub. On a store shared with other hubs, reads wait
/// for the writes in flight and writes are kept to run again
/// (HubCore+SharedStore.swift).
extension HubCore {
    /// Does the work of one input; returns the stop request's callback.
    func take(_ input: Input) -> (@Sendable () -> Void)? {
        if shared != nil, input.readsState {
            // Nothing is in flight (else it would be parked): reads see what
            // the other hubs committed, as far as this hub has pushed it.
            prepareSharedRead()
            defer { cache.readsAhead = nil }
            return takeNow(input)
        }
        return takeNow(input)
    }

    func takeNow(_ input: Input) -> (@Sendable () -> Void)? {
        switch input {
        case .open(let session): open(session)
        case .request(let session, let request):
            if shared != nil, request.operation.isWrite {
                rerunnably(input) { handle(request, from: session) }
                return nil
            }
            answeringSync = request.operation.handsOverSyncState
            handle(request, from: session)
            answeringSync = false
        case .refused(let session, let id, let error): answer(session, id: id, error: error)
        case .close(let session): close(session)
        case .rest(let call):
            if shared != nil, call.operation.isWrite {
                rerunnably(input) { handle(call) }
            } else {
                handle(call)
            }
        case .committed(let outcome):
            committed(outcome)
            if shared != nil { return unpark() }
        case .headAdvanced(let head):
            headAdvanced(to: head)
            return unpark()
        case .stop(let done): return done
        case .system(let writes, let atomic, let actor, let done):
            if shared != nil {
                rerunnably(input) { system(writes, atomic: atomic, actor: actor, done: done) }
            } else {
                system(writes, atomic: atomic, actor: actor, done: done)
            }
        case .scan(let prefix, let done):
            done((try? records(prefix: prefix, after: nil, limit: 1000).0) ?? [])
        case .query(let query, let done):
            done((try? queryRecords(query, after: nil, pageLimit: 1000).0) ?? [])
        case .clientRows(let done): done(clientRows())
        case .analyzed(let outcome):
            if shared != nil {
                rerunnably(input) { takeAnalyzed(outcome) }
            } else {
                takeAnalyzed(outcome)
            }
        }
        return nil
    }

    func system(_ writes: [Write], atomic: Bool, actor: Actor,
                        done: @Sendable (Result<JSONObject, ProtocolError>) -> Void) {
        switch write(writes, atomic: atomic, key: nil, actor: actor) {
        case .success(let result):
            fanOut(result.changes)
            done(.success(result.reply))
        case .failure(let error):
            done(.failure(error))
        }
    }

    func open(_ session: Session) {
        session.connectedAt = configuration.clock()
        session.lastHeardAt = session.connectedAt
        if configuration.authenticator == nil { session.actor = Actor(user: "anonymous", role: "admin") }
        session.slot = registry.makeSubscriber()
        if session.slot == sessions.count { sessions.append(session) } else { sessions[session.slot] = session }
        metrics.sessions.add(1, ordering: .relaxed)
    }

    func close(_ session: Session) {
        guard session.slot >= 0 else { return }
        session.stopWaitingForToken(metrics)
        let targets = liveQueries.isEmpty ? [] : registry.subscriptions(of: session.slot)
        registry.releaseSubscriber(session.slot)
        dropUnusedQueries(targets)
        sessions[session.slot] = nil
        session.slot = -1
        if session.saidHello { metrics.clients.subtract(1, ordering: .relaxed) }
        setOutbox(0, of: session)
        metrics.sessions.subtract(1, ordering: .relaxed)
        metrics.subscriptions.store(registry.count, ordering: .relaxed)
    }

    func committed(_ outcome: CommitOutcome) {
        // The memory holds changes the store refused: back to what it holds
        // (see HubCore+StorageFaults.swift), or, when another hub committed
        // first, to the new head and the writes run again on it
        // (HubCore+SharedStore.swift).
        if let error = outcome.error {
            if shared != nil, error.isHeadMoved, !outcome.discarded { return headMoved(error) }
            return commitFailed(outcome, error: error)
        }
        if storageFaults.failing { commitsRecovered() }
        guard outcome.lastSeq > committedSeq else { return }
        committedSeq = outcome.lastSeq
        cache.committed(through: committedSeq)
        let done = uncommitted.prefix { $0.seq <= committedSeq }.count
        uncommitted.removeFirst(done)
        recentKeys.committed(through: committedSeq)
        if shared != nil { sharedCommitted() }
        metrics.recordCommit(nanos: outcome.durationNanos, units: outcome.tokens.count, inPlace: outcome.inPlace)
        metrics.committedSeq.store(Int(committedSeq), ordering: .relaxed)
        // The floor moves only when retention prunes: a look a second is plenty.
        let now = configuration.clock()
        if now - floorCheckedAt >= 1000, let floor = try? cache.reader.sequenceBounds().floor {
            floorCheckedAt = now
            metrics.floorSeq.store(Int(floor), ordering: .relaxed)
            updateClientGauges()
        }
    }
}
