import TallyClient
import TallyProtocol

/// Resync progress: the phases between a (re)connect and a mirror that is
/// live with its outbox replayed (`ResyncState`), told to `progress` (the
/// stderr of `mirror run`) as they change and stored in `meta` (`resync`)
/// for `mirror status`, at most a few times a second.
extension MirrorSync {
    /// The resync is now `state` (nil: none).
    func setResync(_ state: ResyncState?) {
        resyncTracker.set(state, now: MirrorStore.now())
        configuration.progress?(state)
        storeResync()
    }

    /// From `tick`: a wait moves on with the clock, and the last change
    /// before a quiet moment gets stored.
    func tickResync() {
        if resyncTracker.current?.phase == .waiting {
            resyncTracker.refresh(now: MirrorStore.now())
            configuration.progress?(resyncTracker.current)
        }
        storeResync()
    }

    /// Stores the state if it is due (see `ResyncTracker`).
    func storeResync() {
        guard let due = resyncTracker.due(now: MirrorStore.now()) else { return }
        do {
            try store.setMeta(["resync": due.map { JSONValue.object($0.json).serializedString }])
        } catch {
            configuration.log?("cannot store the resync progress: \(error)")
        }
    }

    /// The client's steps between hello and live.
    func syncProgressed(_ progress: SyncProgress) {
        guard !stopped else { return }
        switch progress {
        case .waiting(let delay): setResync(ResyncState(phase: .waiting, total: delay))
        case .subscribing: setResync(ResyncState(phase: .receiving))
        case .receiving(let target, let records): setResync(ResyncState(phase: .receiving, target: target.key, done: records))
        }
    }

    /// A chunk of a snapshot or of missed changes is stored. Large batches
    /// pushed while live are not a resync.
    func applied(_ done: Int, of total: Int, target: SubscriptionTarget) {
        guard !live else { return }
        setResync(ResyncState(phase: .applying, target: target.key, done: done, total: total))
    }

    /// Live: the writes waiting in the outbox now are what the resync
    /// still has to do (writes made from now on are not part of it).
    func startReplay() {
        flushCompleted()
        let backlog: (count: Int, maxID: Int64)
        do { backlog = try store.pendingSummary() } catch { return fail("cannot read the outbox: \(error)") }
        let (count, maxID) = backlog
        guard count > 0 else {
            replayBacklog = nil
            return setResync(nil)
        }
        replayBacklog = (maxID, count, 0)
        setResync(ResyncState(phase: .replaying, done: 0, total: count))
    }

    /// The hub confirmed (or refused) an entry.
    func replayed(_ entry: OutboxEntry) {
        guard var backlog = replayBacklog, entry.id <= backlog.maxID else { return }
        backlog.done += 1
        if backlog.done >= backlog.total {
            replayBacklog = nil
            setResync(nil)
        } else {
            replayBacklog = backlog
            setResync(ResyncState(phase: .replaying, done: backlog.done, total: backlog.total))
        }
    }
}
