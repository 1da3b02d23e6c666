import TallyProtocol

/// A record as the mirror holds it: the hub's copy (`base`, at `version` and
/// `seq`) and the local view (`data`: the hub's copy with the outbox's
/// pending writes applied). With nothing pending they are equal.
public struct MirrorRecord: Sendable, Equatable {
    public var name: String
    /// The hub's version of `base`; 0 when the hub has no such record (yet).
    public var version: Int64
    /// The seq of the last hub change applied to `base`.
    public var seq: Int64
    /// The local view; nil when deleted locally (or never on the hub).
    public var data: JSONObject?
    /// The last copy the hub confirmed; nil when the hub has none.
    public var base: JSONObject?
    /// Local time (ms) of the last change to the row.
    public var updated: Int64
}

/// A list as the mirror holds it (lists are read-only in the mirror).
public struct MirrorList: Sendable, Equatable {
    public var name: String
    public var version: Int64
    public var seq: Int64
    public var entries: [String]
}

/// One write waiting for the hub's ok.
public struct OutboxEntry: Sendable, Equatable {
    public var id: Int64
    /// The record it writes.
    public var name: String
    /// The write as the protocol spells it, without `version` and `idem`.
    public var op: JSONObject
    /// Sent with every attempt: a resend after a lost reply applies once.
    public var idem: String
    /// The hub version the local copy was at when the write was made
    /// (-1: sent without one, last writer wins).
    public var baseVersion: Int64
    /// The local view the write was made against (the merge's base).
    public var base: JSONObject?
    public var created: Int64
    public var attempts: Int64
    public var lastError: String?
    /// After a merge: the writes that replace `op`, and the next one to send.
    public var plan: [JSONObject]?
    public var step: Int
    /// How many times the entry was merged (part of the plan's idempotency keys).
    public var revision: Int
    /// `pending`, or `failed` when the hub refused it for good.
    public var state: String

    /// The message for the next attempt: the write with its base version
    /// (an `advance` checks its `from` stage instead) and its idempotency key.
    public var message: JSONObject {
        if let plan, step < plan.count {
            var message = plan[step]
            message["idem"] = .string("\(idem)~\(revision).\(step)")
            return message
        }
        var message = op
        // An advance checks its `from` stage; a negative base version marks
        // a last-writer-wins write (a conflict record's update).
        if op["op"]?.stringValue != "advance", baseVersion >= 0 { message["version"] = .int(baseVersion) }
        message["idem"] = .string(idem)
        return message
    }

    /// The writes still to come, for the local view.
    var remainingWrites: [JSONObject] {
        guard let plan else { return [op] }
        return Array(plan.dropFirst(step)).filter { $0["name"]?.stringValue == name }
    }
}

/// A field both sides changed, recorded under a `both` policy.
public struct ConflictRecord: Sendable, Equatable {
    public var id: String
    public var name: String
    public var field: String
    public var local: JSONValue?
    public var hub: JSONValue?
    public var base: JSONValue?
    public var policy: String
    public var created: Int64
    /// nil while open; `local` or `hub` once resolved.
    public var resolved: String?

    /// The `conflicts/<id>` record the hub gets.
    public func hubRecord(mirror: String) -> JSONObject {
        var record: JSONObject = ["name": .string(name), "field": .string(field), "local": local ?? .null,
                                  "hub": hub ?? .null, "base": base ?? .null, "policy": .string(policy),
                                  "created": .int(created), "resolved": .bool(resolved != nil), "mirror": .string(mirror)]
        if let resolved { record["take"] = .string(resolved) }
        return record
    }

    public var json: JSONObject {
        var object: JSONObject = ["id": .string(id), "name": .string(name), "field": .string(field),
                                  "local": local ?? .null, "hub": hub ?? .null, "base": base ?? .null,
                                  "policy": .string(policy), "created": .int(created)]
        object["resolved"] = resolved.map(JSONValue.string) ?? .null
        return object
    }
}

/// How a subscription target is written in the store and on the command line.
enum MirrorTarget {
    /// `orders/` → the prefix; a name without a trailing slash → that record and that list.
    static func targets(forPattern pattern: String, catalog: WorkflowCatalog) -> [SubscriptionTarget] {
        if pattern.isEmpty || pattern.hasSuffix("/") {
            var targets: [SubscriptionTarget] = [.prefix(pattern)]
            // A workflow's list (`orders`) belongs with its records.
            for rule in catalog.rules where rule.prefix == pattern {
                if let list = rule.list { targets.append(.list(list)) }
            }
            return targets
        }
        return [.record(pattern), .list(pattern)]
    }
}
