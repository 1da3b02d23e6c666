import TallyClient
import TallyProtocol

/// A field both sides changed, under a `both` policy: the hub's value
/// stays, and this is what gets recorded.
public struct FieldConflict: Sendable, Equatable {
    /// A top-level member, or `*` for the record as a whole (deleted on one side).
    public var field: String
    public var local: JSONValue?
    public var hub: JSONValue?
    public var base: JSONValue?
}

/// What replaying one outbox entry against a hub that moved on comes to.
public struct MergeOutcome: Sendable, Equatable {
    /// The writes that take the hub to the merged state, in order; empty
    /// when the hub already holds it (the entry is then done).
    public var steps: [JSONObject]
    public var conflicts: [FieldConflict]
    /// The merged record (nil: deleted).
    public var merged: JSONObject?
}

/// The mirror's merge rule, field by field against the copy the local write
/// was based on (PRODUCT.md): a field changed on one side only takes
/// that side's value; a field changed on both sides follows the workflow when
/// it is the stage (the furthest stage legally reachable from the hub's wins,
/// so a stage never moves backwards) and the prefix's policy otherwise. Pure.
public enum ThreeWayMerge {
    /// Merges a record write (`set`, `delete`, at a path or whole).
    /// - Parameters:
    ///   - op: the local write as the protocol spells it.
    ///   - base: the local copy the write was made against (nil: absent).
    ///   - hub: the hub's current data (nil: the record does not exist) at `hubVersion`.
    public static func merge(name: String, op: JSONObject, base: JSONObject?, hub: JSONObject?, hubVersion: Int64,
                             rule: WorkflowRule?, policy: MergePolicy) -> MergeOutcome {
        let local = LocalEffect.apply(op, to: base, rule: rule)
        if local == hub || local == base { return MergeOutcome(steps: [], conflicts: [], merged: hub) }
        // The hub did not change the record (only its version moved): the local write goes on top.
        if hub == base { return plan(name: name, target: local, hub: hub, hubVersion: hubVersion, rule: rule, reason: nil, conflicts: []) }

        switch (local, hub) {
        case (nil, _?), (_?, nil):
            // Deleted on one side, changed on the other: the record as a whole is the field.
            let conflict = FieldConflict(field: "*", local: local.map(JSONValue.object), hub: hub.map(JSONValue.object),
                                         base: base.map(JSONValue.object))
            switch policy {
            case .hub: return MergeOutcome(steps: [], conflicts: [], merged: hub)
            case .both: return MergeOutcome(steps: [], conflicts: [conflict], merged: hub)
            case .client:
                var target = local
                if hub == nil, let rule, var created = target {
                    // Recreating a workflow record starts it over: the hub stamps stage, history, owner.
                    for field in rule.protectedFields { created[field] = nil }
                    target = created
                }
                return plan(name: name, target: target, hub: hub, hubVersion: hubVersion, rule: rule, reason: nil, conflicts: [])
            }
        case (nil, nil):
            return MergeOutcome(steps: [], conflicts: [], merged: nil)
        case (let local?, let hub?):
            let old = base ?? [:]
            var merged = JSONObject()
            var conflicts: [FieldConflict] = []
            var keys = Set(old.keys).union(local.keys).union(hub.keys).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            if let rule { keys.removeAll { rule.protectedFields.contains($0) } }
            for key in keys {
                let (b, l, h) = (old[key], local[key], hub[key])
                if l == b || l == h {
                    merged[key] = h
                } else if h == b {
                    merged[key] = l
                } else {
                    switch policy {
                    case .hub: merged[key] = h
                    case .client: merged[key] = l
                    case .both:
                        merged[key] = h
                        conflicts.append(FieldConflict(field: key, local: l, hub: h, base: b))
                    }
                }
            }
            if let rule {
                for field in rule.protectedFields where field != rule.stageField { merged[field] = hub[field] }
                merged[rule.stageField] = hub[rule.stageField]
                // The stage: whichever side moved it further, if the hub's stage can get there.
                if let l = local[rule.stageField]?.stringValue, let h = hub[rule.stageField]?.stringValue,
                   l != old[rule.stageField]?.stringValue {
                    merged[rule.stageField] = .string(rule.furthest(local: l, hub: h))
                }
            }
            let reason = op["op"]?.stringValue == "advance" ? op["reason"]?.stringValue : nil
            return plan(name: name, target: merged, hub: hub, hubVersion: hubVersion, rule: rule, reason: reason,
                        conflicts: conflicts)
        }
    }

    /// Merges a local `advance` the hub refused because the record is no
    /// longer in its `from` stage: advance on from the hub's stage if the
    /// local target is further along and legally reachable; else the hub's
    /// stage stands and nothing is sent.
    public static func mergeStage(name: String, op: JSONObject, hubStage: String, rule: WorkflowRule?) -> [JSONObject] {
        guard let rule, let to = op["to"]?.stringValue, to != hubStage else { return [] }
        let target = rule.furthest(local: to, hub: hubStage)
        guard target != hubStage, let chain = rule.path(from: hubStage, to: target) else { return [] }
        return advances(name: name, from: hubStage, chain: chain, reason: op["reason"]?.stringValue, finalStage: to)
    }

    /// The writes that take the hub from `hub` to `target`.
    static func plan(name: String, target: JSONObject?, hub: JSONObject?, hubVersion: Int64, rule: WorkflowRule?,
                     reason: String?, conflicts: [FieldConflict]) -> MergeOutcome {
        guard let target else {
            let steps: [JSONObject] = hub == nil ? [] : [["op": "delete", "name": .string(name), "version": .int(hubVersion)]]
            return MergeOutcome(steps: steps, conflicts: conflicts, merged: nil)
        }
        var steps: [JSONObject] = []
        var version = hubVersion
        if let rule, let hub, let from = hub[rule.stageField]?.stringValue, let to = target[rule.stageField]?.stringValue,
           from != to, let chain = rule.path(from: from, to: to) {
            steps += advances(name: name, from: from, chain: chain, reason: reason, finalStage: to)
            version += Int64(chain.count)
        }
        var data = target
        var current = hub ?? [:]
        if let rule {
            for field in rule.protectedFields {
                data[field] = nil
                current[field] = nil
            }
        }
        if hub == nil || data != current {
            steps.append(["op": "set", "name": .string(name), "data": .object(data), "version": .int(hub == nil ? 0 : version)])
        }
        return MergeOutcome(steps: steps, conflicts: conflicts, merged: target)
    }

    static func advances(name: String, from: String, chain: [String], reason: String?, finalStage: String) -> [JSONObject] {
        var steps: [JSONObject] = []
        var previous = from
        for stage in chain {
            var step: JSONObject = ["op": "advance", "name": .string(name), "from": .string(previous), "to": .string(stage)]
            if stage == finalStage, let reason { step["reason"] = .string(reason) }
            steps.append(step)
            previous = stage
        }
        return steps
    }
}
