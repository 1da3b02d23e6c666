import TallyHTTP
import TallyNet
import TallyProtocol
import TallyStore
import TallyWebSocket

/// What the core does when a commit fails (a full disk, an I/O error, a
/// read-only file system): the hub stays up and answers instead of exiting.
///
/// By the time a commit fails, the core has gone on: later writes were
/// applied on top of the failed ones, their replies and pushes wait in
/// `held`, their units are queued in the store. None of it may reach a
/// client ("acknowledged means durable"), and none of it may stay in
/// memory, where the next write would build on state the file never held.
/// So the core drops everything past the last committed seq: the pinned
/// states in the cache (read from the store again on next use), the
/// uncommitted changes, their idempotency keys, the workflow stats and the
/// code index (both rebuilt from the store on next use), the units not yet
/// handed to the store; the head goes back to the committed seq, so the next
/// accepted write takes committedSeq + 1 and the log stays gap-free. Every
/// reply and REST response waiting for a dropped seq becomes a
/// `storage_failed` answer, every push waiting for one is dropped. A hello
/// or subscribe answered so is followed by a close (1013, try again later):
/// the client had been handed a seq or a snapshot that is no longer true,
/// the subscription is registered all the same, and a client library
/// waiting for that answer resumes cleanly only through a reconnect. The store
/// discards the units it still holds from before (they stood on the failed
/// state: `Store.resumeAfterFailure`), reporting them as `discarded`, which
/// the core then ignores: it has rolled them back already.
///
/// Nothing else changes: the next write is tried as usual, so once the disk
/// has room again the hub goes on by itself.
extension HubCore {
    /// Handles a failed commit report; called by `committed`.
    func commitFailed(_ outcome: CommitOutcome, error: StoreError) {
        // Units queued behind a failure that was handled already.
        guard !outcome.discarded else { return }
        metrics.commitFailures.add(1, ordering: .relaxed)
        let dropped = rollBackToCommitted(answering: Self.failure(error))
        store.resumeAfterFailure()
        let now = configuration.clock()
        if let suppressed = storageFaults.failed(at: now) {
            logger.error("store.commit_failed", ["error": "\(error)", "committed_seq": String(committedSeq),
                                                 "dropped_changes": String(dropped),
                                                 "failures_not_logged": String(suppressed)])
        }
    }

    /// The first commit after failures succeeded.
    func commitsRecovered() {
        guard let failures = storageFaults.recovered() else { return }
        logger.info("store.commit_recovered", ["failed_commits": String(failures)])
    }

    /// Drops everything past `committedSeq` (see the extension's comment).
    /// Held answers past it become `failure`; with no failure they are
    /// dropped unsent, their writes to be run again (a shared store whose
    /// head another hub moved: HubCore+SharedStore.swift). Returns how many
    /// accepted changes were dropped.
    @discardableResult
    func rollBackToCommitted(answering failure: ProtocolError?) -> Int64 {
        let dropped = headSeq - committedSeq
        var kept: [(seq: Int64, output: Output)] = []
        kept.reserveCapacity(held.count - heldHead)
        for (seq, output) in held[heldHead...] {
            guard seq > committedSeq else {
                kept.append((seq, output))
                continue
            }
            guard let failure else {
                // Every output past the commit was a write's, kept to run again.
                if case .close = output { kept.append((0, output)) }
                continue
            }
            // Seq 0: released at once, in the place the original held.
            switch output {
            case .reply(let session, let bytes):
                metrics.requestErrors.add(1, ordering: .relaxed)
                kept.append((0, .reply(session, Self.errorReply(to: bytes, failure))))
            case .syncReply(let session, let bytes):
                metrics.requestErrors.add(1, ordering: .relaxed)
                kept.append((0, .reply(session, Self.errorReply(to: bytes, failure))))
                kept.append((0, .close(session, .tryAgainLater, "storage failed: reconnect and resume")))
            case .http(let responder, _):
                metrics.requestErrors.add(1, ordering: .relaxed)
                kept.append((0, .http(responder, REST.response(for: failure))))
            case .fanout:
                break  // a change that was never committed is never pushed
            case .close:
                kept.append((0, output))
            case .analyze:
                break  // nor analysed: the record never entered media-uploaded
            }
        }
        held = kept
        heldHead = 0
        units.removeAll(keepingCapacity: true)
        uncommitted.removeAll { $0.seq > committedSeq }
        recentKeys.rolledBack(after: committedSeq)
        cache.dropUncommitted()
        if shared != nil {
            // Undone write by write: another hub's head moves often, and a
            // recount from the store would cost O(open records) each time.
            for undo in statsUndo.reversed() where undo.seq > committedSeq {
                workflowStats[undo.prefix]?.apply(undo.inverse)
            }
            statsUndo.removeAll()
            if failure != nil { rerunnable.removeAll() }
        } else {
            workflowStats = [:]
        }
        rereadLimitedQueries()
        headSeq = committedSeq
        metrics.headSeq.store(Int(headSeq), ordering: .relaxed)
        metrics.rolledBackChanges.add(Int(dropped), ordering: .relaxed)
        return dropped
    }

    /// What the writes of a failed commit are answered: `unavailable` when
    /// the store's server could not be reached, else `storage_failed`.
    static func failure(_ error: StoreError) -> ProtocolError {
        if error.isUnreachable {
            return ProtocolError(.unavailable, unavailableMessage)
        }
        return ProtocolError(.storageFailed, storageFailedMessage(error))
    }

    static let unavailableMessage = "the hub cannot reach its database (PostgreSQL): this change, or one it depends on, "
        + "was not acknowledged; it may have landed if its commit was under way, so retry with the same idempotency key"

    /// What a client is told; SQLite's words for the code, never a path.
    static func storageFailedMessage(_ error: StoreError) -> String {
        "the hub could not commit this change, or one this answer depends on, to storage (\(error.summary)); "
            + "nothing of it was kept: retry later"
    }

    /// `{"id":…,"ok":false,"error":…}` answering the request that `reply`
    /// (a held reply, `id` first when there is one) answered.
    static func errorReply(to reply: [UInt8], _ error: ProtocolError) -> [UInt8] {
        var writer = MessageWriter()
        // Rare, so parsing the reply is cheaper than keeping every id beside it.
        if case .object(let object)? = try? JSONValue.parse(reply, limits: .stored), let id = object["id"] {
            writer.value("id", id)
        }
        writer.bool("ok", false)
        writer.value("error", error.json)
        return writer.finish()
    }
}

extension Operation {
    /// Whether the answer hands the client a starting point that a rolled
    /// back seq would make false: hello's `seq`, a subscription's snapshot
    /// or replay.
    var handsOverSyncState: Bool {
        switch self {
        case .hello, .subscribe: true
        case .get, .unsubscribe, .write, .publish, .report: false
        }
    }
}

/// Failed commits since the last success, so that a full disk is logged
/// once every `logIntervalMillis`, not once per refused write, and a
/// flapping one no more often.
struct StorageFaults {
    static let logIntervalMillis: Int64 = 10_000

    /// A commit failed and none has succeeded since.
    private(set) var failing = false
    private var failures = 0
    /// A failure of this run of failures was logged.
    private var logged = false
    private var lastLoggedAt = Int64.min
    private var notLogged = 0

    /// Counts a failure; returns how many went unlogged before it when this
    /// one is to be logged, nil when it is not.
    mutating func failed(at now: Int64) -> Int? {
        failing = true
        failures += 1
        guard lastLoggedAt == .min || now &- lastLoggedAt >= Self.logIntervalMillis else {
            notLogged += 1
            return nil
        }
        defer { notLogged = 0 }
        lastLoggedAt = now
        logged = true
        return notLogged
    }

    /// A commit succeeded: the failures since the last success, when one of
    /// them was logged (so each failure line gets at most one recovery line).
    mutating func recovered() -> Int? {
        defer {
            failing = false
            failures = 0
            logged = false
        }
        return logged ? failures : nil
    }
}
