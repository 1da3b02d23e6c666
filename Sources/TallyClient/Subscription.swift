import TallyProtocol

/// The state a subscription starts from: the reply to a subscribe without
/// `since`, or a resnapshot (the hub's log no longer reached back).
public struct Snapshot: Sendable, Equatable {
    /// The state is as of this seq; later changes follow as `.changes`.
    public var seq: Int64
    /// True when a resume was asked for and the hub could not serve it:
    /// whatever the subscriber held is to be replaced by this.
    public var resnapshot: Bool
    /// A prefix's records (all pages, in name order), or the one record of
    /// a record subscription (empty when it does not exist).
    public var records: [RecordEnvelope]
    /// A list subscription's list (nil when it does not exist).
    public var list: ListEnvelope?
    /// The subscribe reply as it came (for a path subscription's `value`).
    public var reply: JSONObject
}

/// What a subscription handler receives.
public enum SubscriptionEvent: Sendable {
    /// The current state (first subscribe, or resnapshot).
    case snapshot(Snapshot)
    /// Changes in seq order; after them the subscription has seen
    /// everything up to `through`.
    case changes([Change], through: Int64)
    /// A published event (topic subscriptions).
    case event(topic: String, data: JSONValue)
    /// What changes did to a live query's result (query subscriptions), in
    /// seq order: a push, or a resume's delta.
    case queryChange(QueryChange)
    /// The hub refused the subscription (bad name, forbidden, …); it is removed.
    case failed(ProtocolError)
}

/// What one change did to a live query's result (PROTOCOL.md, "Live
/// queries"): the records in it now that entered or changed, the names that
/// left. A resume answered with a delta arrives as one of these.
public struct QueryChange: Sendable, Equatable {
    public var seq: Int64
    public var entered: [RecordEnvelope]
    public var changed: [RecordEnvelope]
    public var left: [String]
    /// A resume's delta: `changed` holds every record changed while away
    /// that is in the result now, whether the subscriber had it or not.
    public var isDelta: Bool

    init(seq: Int64, json: JSONObject, isDelta: Bool = false) {
        func records(_ key: String) -> [RecordEnvelope] {
            (json[key]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RecordEnvelope.init(json:)) }
        }
        self.seq = seq
        entered = isDelta ? [] : records("entered")
        changed = isDelta ? records("records") : records("changed")
        left = (json["left"]?.arrayValue ?? []).compactMap(\.stringValue)
        self.isDelta = isDelta
    }
}

/// A handle on one subscription: `cancel()` ends it.
public final class Subscription: Sendable {
    public let id: Int
    public let target: SubscriptionTarget
    private let core: ClientCore

    init(id: Int, target: SubscriptionTarget, core: ClientCore) {
        self.id = id
        self.target = target
        self.core = core
    }

    /// Stops delivery and unsubscribes on the hub (when connected).
    public func cancel() {
        let core = self.core
        let id = self.id
        core.queue.async { core.cancel(subscription: id) }
    }
}

extension SubscriptionTarget {
    /// The `subscribe`/`unsubscribe` members naming this target.
    var members: JSONObject {
        switch self {
        case .record(let name): ["name": .string(name)]
        case .path(let name, let path): ["name": .string(name), "path": .string(path.description)]
        case .list(let name): ["list": .string(name)]
        case .prefix(let prefix): ["prefix": .string(prefix)]
        case .topic(let topic): ["topic": .string(topic)]
        case .query(let query): ["query": query.json]
        }
    }

    /// Whether a change push concerns this target. A push is sent once per
    /// connection however many subscriptions it matches, so the client
    /// routes it to each one itself.
    func matches(_ change: Change) -> Bool {
        switch (self, change.target) {
        case (.record(let name), .record(let changed)): return name.sameBytes(as: changed)
        case (.path(let name, let path), .record(let changed)):
            guard name.sameBytes(as: changed) else { return false }
            guard let text = change.path, let changedPath = try? RecordPath(parsing: text) else { return true }
            return path.overlaps(changedPath)
        case (.list(let name), .list(let changed)): return name.sameBytes(as: changed)
        case (.prefix(let prefix), .record(let changed)): return changed.hasBytePrefix(prefix)
        default: return false
        }
    }

    var isTopic: Bool { if case .topic = self { true } else { false } }

    /// The `get` members that page this target's snapshot: a prefix's or
    /// an unlimited query's; nil for the others.
    var pageTarget: JSONObject? {
        switch self {
        case .prefix(let prefix): ["prefix": .string(prefix)]
        case .query(let query): ["query": query.json]
        case .record, .path, .list, .topic: nil
        }
    }

    /// A stable text form, e.g. `prefix:orders/` (for logs and stored cursors).
    public var key: String {
        switch self {
        case .record(let name): "record:\(name)"
        case .path(let name, let path): "path:\(name)#\(path)"
        case .list(let name): "list:\(name)"
        case .prefix(let prefix): "prefix:\(prefix)"
        case .topic(let topic): "topic:\(topic)"
        case .query(let query): "query:\(query)"
        }
    }
}
