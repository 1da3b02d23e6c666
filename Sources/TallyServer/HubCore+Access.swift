import TallyEngine
import TallyProtocol
import TallyStore

/// Access checks for reads and subscriptions, and the workflow stats the
/// planner reads (writes are checked by `WorkflowPlanner`).
extension HubCore {
    /// Stands in for a connection that has not authenticated; `handle`
    /// refuses such connections before any operation needs an actor.
    static let nobody = Actor(user: "", role: "")

    var policy: AccessPolicy { configuration.planner.policy }

    /// Records under `prefix` the actor may read: all of them, only its own
    /// (rules with `own`), or none (forbidden).
    func readableRecords(prefix: String, after: String?, limit: Int, actor: Actor) throws(ProtocolError) -> ([RecordState], Bool) {
        switch policy.decide(actor, .read, prefix: prefix) {
        case .allowed:
            return try records(prefix: prefix, after: after, limit: limit)
        case .ifOwner:
            let (records, more) = try records(prefix: prefix, after: after, limit: limit)
            return (records.filter { $0.owner == actor.user }, more)
        case .denied:
            throw AccessPolicy.denied(actor, .read, name: prefix)
        }
    }

    func checkSubscribe(_ target: SubscriptionTarget, actor: Actor) throws(ProtocolError) {
        switch target {
        case .record(let name), .path(let name, _):
            if policy.decide(actor, .subscribe, name: name) == .allowed { return }
            let owner = try cache.record(name)?.owner
            try policy.check(actor, .subscribe, name: name, owner: owner)
        case .list(let name), .topic(let name):
            try policy.check(actor, .subscribe, name: name, owner: nil)
        case .query(let query):
            try checkQuery(query, .subscribe, actor: actor)
        case .prefix(let prefix):
            // Pushes carry no per-subscriber filtering, so a prefix needs a
            // rule that covers every name under it.
            guard policy.decide(actor, .subscribe, prefix: prefix) == .allowed else {
                var error = AccessPolicy.denied(actor, .subscribe, name: prefix)
                if policy.decide(actor, .subscribe, prefix: prefix) == .ifOwner {
                    error.message += "; subscribe to your own records by name instead"
                }
                throw error
            }
        }
    }

    /// A workflow's stats: kept in memory once known; the first time they
    /// are needed after start (or after a failed commit dropped them) they
    /// are read back from the workflow's stats record and its list of open
    /// records, which costs what is open, not what the workflow ever had
    /// (a hub with a million finished orders read every one of them before
    /// its first order write). Recounted from every record only when that
    /// cannot be trusted: no stats record or list configured, none written
    /// yet, or one that does not fit the workflow as configured now
    /// (`WorkflowStats.init(restoring:open:workflow:)`).
    func stats(of workflow: Workflow) throws(ProtocolError) -> WorkflowStats {
        if let known = workflowStats[workflow.prefix] { return known }
        let stats: WorkflowStats
        if let restored = try restoredStats(of: workflow) {
            stats = restored
        } else {
            stats = try recountedStats(of: workflow)
        }
        workflowStats[workflow.prefix] = stats
        return stats
    }

    /// The stats from the stats record and the workflow's open records, read
    /// through the stage index (a live query over its open stages: it costs
    /// what is open), or nil when they cannot be trusted (no stats record,
    /// or one that does not fit the workflow as configured now).
    func restoredStats(of workflow: Workflow) throws(ProtocolError) -> WorkflowStats? {
        guard let statsName = workflow.stats, let record = try cache.record(statsName),
              let stageField = try? RecordPath(parsing: workflow.stageField) else { return nil }
        let openStages = workflow.stages.filter(workflow.isOpen).map { JSONValue.string($0).serialized() }
        var open: [WorkflowStats.OpenRecord] = []
        if !openStages.isEmpty {
            let query = Query(prefix: workflow.prefix, conditions: [Query.Condition(path: stageField, values: openStages)])
            var after: String?
            while true {
                let (page, more) = try queryRecords(query, after: after, pageLimit: 1000)
                open += page.map { WorkflowStats.OpenRecord($0, in: workflow) }
                guard more, let last = page.last?.name else { break }
                after = last
            }
        }
        return WorkflowStats(restoring: record.data, open: open, workflow: workflow)
    }

    /// The stats counted from every record of the workflow (O(its history)).
    func recountedStats(of workflow: Workflow) throws(ProtocolError) -> WorkflowStats {
        metrics.statsRecounts.add(1, ordering: .relaxed)
        var stats = WorkflowStats(workflow: workflow)
        var after: String?
        while true {
            let (page, more) = try records(prefix: workflow.prefix, after: after, limit: 1000)
            for record in page { stats.count(record, in: workflow) }
            guard more, let last = page.last?.name else { break }
            after = last
        }
        return stats
    }

    /// Whether `actor` may read the record `name` (owned by `owner`): an
    /// answer to a write carries the record's data only then.
    func mayRead(_ actor: Actor, name: String, owner: String?) -> Bool {
        switch policy.decide(actor, .read, name: name) {
        case .allowed: true
        case .ifOwner: owner == actor.user
        case .denied: false
        }
    }

    /// Whether `actor` may read the record or list `name` as it is now.
    func mayRead(_ actor: Actor, name: String) -> Bool {
        switch policy.decide(actor, .read, name: name) {
        case .allowed: true
        case .ifOwner: ((try? cache.record(name))??.owner).map { $0 == actor.user } ?? false
        case .denied: false
        }
    }

    /// `error` without the current data a `conflict` carries, when the
    /// caller may write the record but not read it.
    func redacted(_ error: ProtocolError, for actor: Actor) -> ProtocolError {
        guard error.code == .conflict,
              let name = error.details["name"]?.stringValue ?? error.details["list"]?.stringValue,
              error.details["data"] != nil || error.details["entries"] != nil,
              !mayRead(actor, name: name) else { return error }
        var error = error
        error.details["data"] = nil
        error.details["entries"] = nil
        return error
    }

    /// `noteRefusal` for refusals answered on a loop thread (it touches only
    /// atomics and the logger, which are thread-safe).
    func noteRefusalFromLoop(_ error: ProtocolError, actor: Actor?) { noteRefusal(error, actor: actor) }

    /// Counts and logs refusals for `/metrics` and the operator. The log
    /// lines are rate-limited (`refusalLog`); the counters count every one.
    func noteRefusal(_ error: ProtocolError, actor: Actor?) {
        let event: String
        switch error.code {
        case .unauthorized:
            metrics.authFailures.add(1, ordering: .relaxed)
            event = "auth.failed"
        case .forbidden:
            metrics.denied.add(1, ordering: .relaxed)
            event = "access.denied"
        case .originNotAllowed, .hostNotAllowed:
            metrics.browserRefusals.add(1, ordering: .relaxed)
            event = "browser.refused"
        default:
            return
        }
        guard let dropped = refusalLog.admit(now: configuration.clock()) else { return }
        let user = actor?.user ?? "", role = actor?.role ?? ""
        if dropped > 0 {
            logger.warning(event, ["user": user, "role": role, "reason": error.message,
                                   "suppressed": String(dropped)])
        } else {
            logger.warning(event, ["user": user, "role": role, "reason": error.message])
        }
    }
}
