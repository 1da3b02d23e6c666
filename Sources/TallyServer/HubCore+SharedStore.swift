import TallyConcurrency
import TallyEngine
import TallyNet
import TallyProtocol
import TallyStore

/// Several hubs on one store (`SharedStore`: PostgreSQL). Each hub's core
/// applies its writes before they commit, numbering their changes after the
/// last change it knows of, as a lone hub does; the store's group commit
/// checks that number against the global head and refuses a group that
/// another hub's commit got ahead of (`StoreError.isHeadMoved`). Then:
///
/// 1. **Roll back without answering.** Everything past the committed seq
///    goes, as after a failed commit (HubCore+StorageFaults.swift), except
///    that the writes whose answers waited for it are kept to run again
///    (`rerunnable`), and nobody hears of the dropped state: their replies
///    and pushes are dropped unsent. The workflow stats are moved back by
///    the inverse of each dropped write's delta (`statsUndo`).
/// 2. **Catch up** (`catchUp`): read the other hubs' changes after the
///    committed seq, each with the record it changed (`prior`), apply each
///    to the cache and the workflow stats, and push it to this hub's
///    subscribers exactly as it was pushed where it was made (the same bytes).
/// 3. **Run the writes again**, in their order, on the new state: a version
///    check now sees the other hub's write (a race on one record ends in
///    `conflict` for one side), stock never goes below zero, and an
///    idempotency key the other hub committed is answered from the store.
///
/// A write's answer and pushes therefore always wait for a commit while
/// other writes are in flight (`holdFloor`), so that they can be taken back.
/// Everything else — reads, hellos, subscribes, events — waits (`parked`)
/// until no write is in flight: it answers from committed state only, and
/// replies leave in request order. A hub alone on its store loses nothing
/// to this but the wait of a read behind a write.
///
/// Commits of other hubs while this one is idle arrive through the store's
/// watch (`headAdvanced`), and a client that resumes from a seq this hub
/// has not applied yet makes it catch up first (`catchUpIfBehind`).
extension HubCore {
    /// Most changes read from the store at once while catching up.
    static let catchUpPage = 1_000
    /// Most times a read that found another hub's newer commit catches up
    /// and reads again (`StateCache.readsAhead`, `records(prefix:)`).
    static let maxRereads = 8

    /// Starts the store's watch of the global head; each new head reaches
    /// the core as `.headAdvanced`.
    func watchSharedHead(_ shared: any SharedStore) {
        let runner = self.runner
        let metrics = self.metrics
        let posted = LockedValueBox<Int64>(0)
        shared.watchHead { reading in
            metrics.storeReading(reading)
            guard let head = reading.head else { return }
            let isNew = posted.withLock { posted in
                defer { posted = max(posted, head) }
                return head > posted
            }
            if isNew { runner.post(.headAdvanced(head)) }
        }
    }

    // MARK: Parking and rerunning

    /// Whether `input` must wait for the writes in flight (see above).
    func mustPark(_ input: Input) -> Bool {
        switch input {
        case .committed, .headAdvanced, .open, .close, .clientRows: return false
        default:
            if !parked.isEmpty { return true }
            return headSeq > committedSeq && !input.isWrite
        }
    }

    /// Takes parked inputs in order while nothing is in flight (writes go
    /// on regardless, and put a write in flight themselves).
    func unpark() -> (@Sendable () -> Void)? {
        var stopped: (@Sendable () -> Void)?
        var taken = 0
        while taken < parked.count {
            let input = parked[taken]
            if headSeq > committedSeq, !input.isWrite { break }
            taken += 1
            if let done = take(input) { stopped = done }
        }
        parked.removeFirst(taken)
        return stopped
    }

    /// Runs a write so that it can be run again: with writes in flight, its
    /// answer waits for everything in flight to commit (`holdFloor`), since
    /// it was decided on that state — a refusal too, or an idempotent
    /// retry's answer — and while its answer waits it is kept in
    /// `rerunnable`, under the same seq. The answer and the kept input so
    /// go together: both leave at that seq's commit, or both are dropped
    /// when the head moves before it (else an answer could leave and the
    /// write still run again, answered twice).
    ///
    /// A write that changes nothing with nothing in flight (a conflict, an
    /// illegal transition, short stock) commits nothing, so no head check
    /// tells whether its answer stood on another hub's latest commit: a
    /// client told of a write by one hub and sending the next to this one
    /// would be refused on the state before it (`from: "in-progress"` of an
    /// order this hub still has at "received"). So such an answer leaves
    /// only once the store's head is read and found to be what this hub has
    /// applied; else it is dropped unsent, the hub catches up, and the
    /// write runs once more. A system write's `done` has run already, so
    /// it is not checked.
    func rerunnably(_ input: Input, _ body: () -> Void) {
        var checked = false
        while true {
            let idle = headSeq == committedSeq
            let applied = committedSeq
            let answered = held.count
            holdFloor = idle ? 0 : headSeq
            body()
            holdFloor = 0
            // A write that made changes answers after its last one, the head now.
            if headSeq > committedSeq {
                rerunnable.append((headSeq, input))
                return
            }
            if case .system = input { return }
            // `committedSeq` moved: the write caught up itself, its answer is fresh.
            guard idle, !checked, committedSeq == applied, storeIsAhead() else { return }
            checked = true
            held.removeSubrange(answered...)
            catchUpOrLog()
        }
    }

    /// Whether the store's global head is past what this hub has applied:
    /// one read of the head row. False when it cannot be read (the answer
    /// then stands on what this hub knows).
    private func storeIsAhead() -> Bool {
        guard let reader = sharedReader, let head = try? reader.sequenceBounds().head else { return false }
        knownHead = max(knownHead, head)
        return head > committedSeq
    }

    /// A commit succeeded: forget what would undo it, and catch up when
    /// another hub has gone further and nothing is in flight here.
    func sharedCommitted() {
        let done = rerunnable.prefix { $0.seq <= committedSeq }.count
        rerunnable.removeFirst(done)
        let undone = statsUndo.prefix { $0.seq <= committedSeq }.count
        statsUndo.removeFirst(undone)
        if knownHead > committedSeq, headSeq == committedSeq { catchUpOrLog() }
    }

    /// The store says the global head is `head`.
    func headAdvanced(to head: Int64) {
        knownHead = max(knownHead, head)
        guard knownHead > committedSeq, headSeq == committedSeq else { return }
        catchUpOrLog()
    }

    /// A client resumes from `since`, which this hub may not have applied
    /// yet (it saw it on another hub): catch up first, so that it gets the
    /// changes it missed instead of a snapshot.
    func catchUpIfBehind(since: Int64?) {
        guard shared != nil, let since, since > committedSeq, headSeq == committedSeq else { return }
        catchUpOrLog()
    }

    /// Another hub committed before the group of this hub that failed (see
    /// the extension's comment).
    func headMoved(_ error: StoreError) {
        metrics.headMoves.add(1, ordering: .relaxed)
        // A system write's `done` ran when it was first accepted: once is enough.
        let inputs = rerunnable.map { kept -> Input in
            guard case .system(let writes, let atomic, let actor, _) = kept.input else { return kept.input }
            return .system(writes, atomic: atomic, actor, { _ in })
        }
        rerunnable.removeAll()
        rollBackToCommitted(answering: nil)
        do {
            try catchUp(afterHeadMoved: true)
        } catch {
            // The store cannot be read: the writes cannot be checked against
            // what it holds, so they are refused as a failed commit's are.
            store.resumeAfterFailure()
            shared?.releaseHeldHead()
            logCatchUpFailure(error)
            for input in inputs { refuse(input, error) }
            return
        }
        metrics.reruns.add(inputs.count, ordering: .relaxed)
        for input in inputs { _ = take(input) }
        // The runs' units go to the store at the end of this batch, after
        // the resume; with none, the store need not hold the head for them.
        store.resumeAfterFailure()
        if units.isEmpty { shared?.releaseHeldHead() }
    }

    /// Answers a write that could not be run again with `error`.
    private func refuse(_ input: Input, _ error: ProtocolError) {
        switch input {
        case .request(let session, let request):
            guard session.slot >= 0, !session.isClosed else { return }
            answer(session, id: request.id, error: error)
        case .rest(let call):
            guard !call.responder.isCancelled else { return }
            emit(.http(call.responder, REST.response(for: error)), after: 0)
        case .system(_, _, _, let done):
            done(.failure(error))
        case .analyzed(let outcome):
            logger.warning("analysis.refused", ["record.name": outcome.job.name, "error": error.message])
        case .open, .refused, .close, .committed, .stop, .scan, .query, .headAdvanced, .clientRows:
            break
        }
    }

    /// Before a read with nothing in flight: catch up with what the store
    /// is known to hold, and have the cache catch up on a state it loads
    /// that is newer still (committed by another hub an instant ago).
    func prepareSharedRead() {
        if knownHead > committedSeq || cache.newestLoadedSeq > committedSeq { catchUpIfBehind(since: .max) }
        cache.readsAhead = { [unowned self] seq in
            guard seq > committedSeq, headSeq == committedSeq else { return false }
            catchUpOrLog()
            return committedSeq >= seq
        }
    }

    // MARK: Catching up

    private func catchUpOrLog() {
        do {
            try catchUp()
        } catch {
            logCatchUpFailure(error)
        }
    }

    /// One line every 10 s at most, saying how many were not logged.
    private func logCatchUpFailure(_ error: ProtocolError) {
        guard let suppressed = catchUpFailureLog.admit(now: configuration.clock()) else { return }
        logger.warning("store.catch_up_failed", ["error": error.message, "committed_seq": String(committedSeq),
                                                 "failures_not_logged": String(suppressed)])
    }

    /// Applies every change committed after `committedSeq` by other hubs,
    /// in seq order, page by page. Only while nothing is in flight here.
    /// `afterHeadMoved`: the store said another head than this hub's, so
    /// finding no change after it means the store went back.
    func catchUp(afterHeadMoved: Bool = false) throws(ProtocolError) {
        // Never with writes in flight: they were numbered after committedSeq.
        guard let reader = sharedReader, headSeq == committedSeq else { return }
        while true {
            let page: [StoredChange]
            do { page = try reader.changesWithPriors(after: committedSeq, limit: Self.catchUpPage) } catch {
                throw .storage(error)
            }
            guard let first = page.first else {
                // Told of a head further on, and no change after ours: the
                // store lost changes this hub applied and went on past them.
                if afterHeadMoved || knownHead > committedSeq { try startOverIfTheStoreWentBack(reader) }
                break
            }
            if first.seq != committedSeq + 1 {
                // Retention pruned what this hub missed: it cannot tell what
                // changed, so every client starts over from a snapshot.
                try startOver(at: first.seq - 1, because: "the store's log no longer holds what this hub missed")
            }
            for stored in page { try apply(stored) }
            if page.count < Self.catchUpPage { break }
        }
        knownHead = max(knownHead, committedSeq)
    }

    /// The store's log floor past this hub's head: the database lost
    /// commits (restored from a backup, a standby promoted that missed the
    /// last ones), and a hub's writer, finding the head behind its own,
    /// moved head and floor 2^32 on (`PostgresWriter.moveOnFromLostHead`),
    /// as a restore of a hub's own store does (ARCHITECTURE.md, "The
    /// sequence after a restore"). The hub starts over at the store's head;
    /// every client resnapshots. A head merely behind this hub's waits for
    /// that move: starting over there would hand out seqs clients have seen.
    private func startOverIfTheStoreWentBack(_ reader: any SharedStoreReading) throws(ProtocolError) {
        let bounds: (head: Int64, floor: Int64)
        do { bounds = try reader.sequenceBounds() } catch { throw .storage(error) }
        guard bounds.floor > committedSeq else { return }
        try startOver(at: bounds.head, because: "the store's head went back (a restore, or a standby promoted) and on")
        knownHead = bounds.head
    }

    /// One change another hub committed: into the cache and the stats,
    /// out to the subscribers here.
    private func apply(_ stored: StoredChange) throws(ProtocolError) {
        switch stored.kind {
        case .record:
            let workflow = configuration.planner.workflows.workflow(for: stored.name)
            do {
                let change = try replayed(stored)
                cache.applyCommitted(change)
                if let workflow, workflowStats[workflow.prefix] != nil,
                   case .record(let before, let after, _) = change.target {
                    workflowStats[workflow.prefix]?.apply(WorkflowStats.Delta(replacing: before, with: after, in: workflow))
                }
                advanceCommitted(to: stored.seq)
                fanOut([change])
            } catch {
                // A change this hub cannot rebuild (a log row from before
                // priors were kept, a damaged one): the record is read from
                // the store again, the stats recounted, and the push goes to
                // everyone who might want it (path subscribers included).
                logger.warning("store.catch_up_replay_failed", ["seq": String(stored.seq), "reason": error.message])
                cache.forgetRecord(stored.name)
                if let workflow { workflowStats[workflow.prefix] = nil }
                advanceCommitted(to: stored.seq)
                fanOut([Change(seq: stored.seq, time: stored.time, name: stored.name,
                               target: .record(before: nil, after: nil, scope: .whole), push: stored.message, reply: [:])])
            }
        case .list:
            cache.forgetList(stored.name)
            advanceCommitted(to: stored.seq)
            slotScratch.removeAll(keepingCapacity: true)
            registry.subscribers(ofList: stored.name, into: &slotScratch)
            if !slotScratch.isEmpty {
                emit(.fanout(SharedFrame(.text, stored.message), slotScratch.compactMap { sessions[$0] }, isEvent: false),
                     after: stored.seq)
            }
        }
        metrics.caughtUpChanges.add(1, ordering: .relaxed)
    }

    /// The change as its hub made it (see `Change.replaying`).
    private func replayed(_ stored: StoredChange) throws(ProtocolError) -> Change {
        guard case .object(let push)? = try? JSONValue.parse(stored.message, limits: .stored) else {
            throw ProtocolError(.storageFailed, "the logged change \(stored.seq) is not a JSON object")
        }
        let prior = try stored.prior.map { prior throws(ProtocolError) in try RecordState(stored: prior) }
        return try Change.replaying(push, message: stored.message, prior: prior)
    }

    private func advanceCommitted(to seq: Int64) {
        committedSeq = seq
        headSeq = seq
        metrics.headSeq.store(Int(seq), ordering: .relaxed)
        metrics.committedSeq.store(Int(seq), ordering: .relaxed)
    }

    /// The log no longer holds the changes after `committedSeq` (this hub
    /// was away longer than retention keeps): forget every cached state and
    /// stat, and close every connection with 1013 so that its client
    /// resumes — from a snapshot, its seq being below the floor.
    private func startOver(at seq: Int64, because reason: String) throws(ProtocolError) {
        logger.warning("store.start_over", ["committed_seq": String(committedSeq), "store_seq": String(seq),
                                            "reason": reason])
        cache.dropAll()
        workflowStats = [:]
        statsUndo.removeAll()
        for case let session? in sessions {
            emit(.close(session, .tryAgainLater, "the hub fell behind its store: reconnect and resume"), after: 0)
        }
        advanceCommitted(to: seq)
        rereadLimitedQueries()
    }
}

extension HubCore.Input {
    /// Reads records or lists for its answer (anything but a write and
    /// the connection's own bookkeeping).
    var readsState: Bool {
        switch self {
        case .request(_, let request): !request.operation.isWrite
        case .rest(let call): !call.operation.isWrite
        case .scan, .query: true
        case .system, .analyzed, .open, .refused, .close, .committed, .stop, .headAdvanced, .clientRows: false
        }
    }

    /// A write: run again when another hub's commit got in first.
    var isWrite: Bool {
        switch self {
        case .request(_, let request): request.operation.isWrite
        case .rest(let call): call.operation.isWrite
        case .system, .analyzed: true
        case .open, .refused, .close, .committed, .stop, .scan, .query, .headAdvanced, .clientRows: false
        }
    }
}

extension Operation {
    var isWrite: Bool {
        if case .write = self { return true }
        return false
    }
}

extension RESTCall.Operation {
    var isWrite: Bool {
        switch self {
        case .writeRecord, .writeList, .advance: true
        case .getRecord, .records, .getList, .changes, .publish, .resolve, .searchItems, .items, .workflows: false
        }
    }
}
