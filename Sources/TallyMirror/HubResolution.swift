import TallyClient
import TallyProtocol

/// What a `conflicts/<id>` record on the hub says about a conflict this
/// mirror recorded. Anyone with write access to `conflicts/**` (the
/// dashboard, REST, another tool) resolves a conflict by setting
/// `"resolved": true` and `"take": "local"|"hub"` on it; the mirror that
/// recorded it (`mirror` equals its client id) then closes its own copy.
/// Pure (docs/mirror.md, "Conflicts").
public enum HubResolution: Sendable, Equatable {
    /// Not resolved on the hub (yet).
    case open
    /// Resolved on the hub by taking a side: `.client` (the mirror's value,
    /// `take: "local"`) or `.hub`.
    case take(MergePolicy)
    /// Not this mirror's to act on, or a resolution it cannot read; the
    /// text says why (for the log).
    case ignored(String)

    /// Reads the hub's `conflicts/<id>` record (nil: it is gone).
    public init(record: JSONObject?, mirror: String) {
        guard let record else {
            self = .ignored("the conflicts record was deleted on the hub")
            return
        }
        guard record["mirror"]?.stringValue == mirror else {
            let owner = record["mirror"].map { $0.stringValue ?? $0.serializedString } ?? "no mirror"
            self = .ignored("recorded by \(owner), not by this mirror (\(mirror))")
            return
        }
        guard record["resolved"] == .bool(true) else {
            self = .open
            return
        }
        switch record["take"]?.stringValue {
        case "local": self = .take(.client)
        case "hub": self = .take(.hub)
        default:
            let take = record["take"]?.serializedString ?? "nothing"
            self = .ignored("resolved with take \(take); only \"local\" or \"hub\" can be acted on")
        }
    }
}

extension ConflictRecord {
    /// Whether the hub's copy of the record (nil: it does not exist) already
    /// holds the mirror's side of this conflict, so taking it writes nothing
    /// (a dashboard that resolves with `take: "local"` may write the value
    /// itself in the same atomic write). For `*` (the record as a whole)
    /// the members the workflow keeps (`stage`, `history`, `owner`) are not
    /// compared: taking the local side never writes them. A field that is
    /// absent and one that is null are the same here: the `conflicts/<id>`
    /// record says `"local": null` for both, and a resolver deletes the field.
    public func isHeld(by hub: JSONObject?, rule: WorkflowRule?) -> Bool {
        guard field == "*" else { return (hub?[field] ?? .null) == (local ?? .null) }
        guard case .object(var mine)? = local else { return hub == nil }
        guard var theirs = hub else { return false }
        for field in rule?.protectedFields ?? [] {
            mine[field] = nil
            theirs[field] = nil
        }
        return mine == theirs
    }
}
