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

    /// A workflow's stats, recounted from its records the first time they
    /// are needed after start.
    func stats(of workflow: Workflow) throws(ProtocolError) -> WorkflowStats {
        if let known = workflowStats[workflow.prefix] { return known }
        var stats = WorkflowStats(workflow: workflow)
        var after: String?
        while true {
            let (page, more) = try records(prefix: workflow.prefix, after: after, limit: 1000)
            for record in page { stats.count(record, in: workflow) }
            guard more, let last = page.last?.name else { break }
            after = last
        }
        workflowStats[workflow.prefix] = stats
        return stats
    }

    /// `noteRefusal` for refusals answered on a loop thread (it touches only
    /// atomics and the logger, which are thread-safe).
    func noteRefusalFromLoop(_ error: ProtocolError, actor: Actor?) { noteRefusal(error, actor: actor) }

    /// Counts and logs refusals for `/metrics` and the operator.
    func noteRefusal(_ error: ProtocolError, actor: Actor?) {
        switch error.code {
        case .unauthorized:
            metrics.authFailures.add(1, ordering: .relaxed)
            logger.warning("auth.failed", ["reason": error.message])
        case .forbidden:
            metrics.denied.add(1, ordering: .relaxed)
            logger.warning("access.denied", ["user": actor?.user ?? "", "role": actor?.role ?? "", "reason": error.message])
        default:
            break
        }
    }
}
