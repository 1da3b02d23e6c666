/// A decoded client message (PROTOCOL.md, "Client messages"). Decoding checks
/// every field's type and every name and path, so the engine only ever sees
/// well-formed operations.
public struct Request: Sendable, Equatable {
    /// Echoed in the reply; a string or an integer.
    public var id: JSONValue?
    public var operation: Operation
    /// Idempotency key of a write.
    public var idempotencyKey: String?

    public init(id: JSONValue? = nil, operation: Operation, idempotencyKey: String? = nil) {
        self.id = id
        self.operation = operation
        self.idempotencyKey = idempotencyKey
    }
}

public enum Operation: Sendable, Equatable {
    case hello(Hello)
    case get(GetTarget)
    case subscribe(SubscriptionTarget, since: Int64?)
    case unsubscribe(SubscriptionTarget)
    /// One write, or several applied atomically (`write`).
    case write([Write], atomic: Bool)
    case publish(topic: String, data: JSONValue)
    /// A client's sync health: writes waiting in its outbox, the last seq it
    /// has applied (PROTOCOL.md, "report").
    case report(outbox: Int64?, seq: Int64?)
}

public struct Hello: Sendable, Equatable {
    /// Versions the client speaks, in any order.
    public var protocols: [Int]
    public var client: String?
    public var token: String?
    public var since: Int64?
    /// Writes waiting in the client's outbox (offline mirrors).
    public var outbox: Int64?

    public init(protocols: [Int], client: String? = nil, token: String? = nil, since: Int64? = nil) {
        self.protocols = protocols
        self.client = client
        self.token = token
        self.since = since
    }
}

public enum GetTarget: Sendable, Equatable {
    case record(String, path: RecordPath?)
    /// One page of a list's entries: those after the `cursor` key (from
    /// the first without), at most `limit` (default: the hub's bound).
    case list(String, cursor: ListKey? = nil, limit: Int? = nil)
    case prefix(String, after: String?, limit: Int)
    /// A page of a live query's result: name order, names > `after`
    /// (unlimited queries), or the whole result of a limited one.
    case query(Query, after: String?, limit: Int)
}

/// Equal and hashed by the bytes of its names (see `ByteKey`).
public enum SubscriptionTarget: Sendable, Hashable {
    case record(String)
    case path(String, RecordPath)
    case list(String)
    case prefix(String)
    case topic(String)
    case query(Query)

    public static func == (lhs: SubscriptionTarget, rhs: SubscriptionTarget) -> Bool {
        switch (lhs, rhs) {
        case (.record(let a), .record(let b)), (.list(let a), .list(let b)),
             (.prefix(let a), .prefix(let b)), (.topic(let a), .topic(let b)):
            return a.sameBytes(as: b)
        case (.path(let a, let p), .path(let b, let q)):
            return a.sameBytes(as: b) && p == q
        case (.query(let a), .query(let b)):
            return a == b
        case (.record, _), (.list, _), (.prefix, _), (.topic, _), (.path, _), (.query, _):
            return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .record(let name): hasher.combine(0 as UInt8); hasher.combine(ByteKey(name))
        case .path(let name, let path): hasher.combine(1 as UInt8); hasher.combine(ByteKey(name)); hasher.combine(path)
        case .list(let name): hasher.combine(2 as UInt8); hasher.combine(ByteKey(name))
        case .prefix(let prefix): hasher.combine(3 as UInt8); hasher.combine(ByteKey(prefix))
        case .topic(let topic): hasher.combine(4 as UInt8); hasher.combine(ByteKey(topic))
        case .query(let query): hasher.combine(5 as UInt8); hasher.combine(query)
        }
    }
}

/// One write to one record or list.
public struct Write: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        case set(JSONObject)
        case setPath(RecordPath, JSONValue)
        case merge(JSONObject)
        case delete
        case deletePath(RecordPath)
        case increment(RecordPath, by: JSONNumber)
        case addEntry(String, at: Int?)
        case removeEntry(String, at: Int?)
        case setEntries([String])
        case deleteList
        /// A workflow stage change (PROTOCOL.md, "advance"); the hub turns
        /// it into plain writes before the engine sees it.
        case advance(Advance)
        /// Adds `by` to the number at the path of an existing record, refused
        /// with `insufficient_stock` when the result would fall below
        /// `atLeast`. Only the hub issues it (stock on delivery).
        case boundedIncrement(RecordPath, by: Int64, atLeast: Int64)
    }

    /// The record's name, or the list's for list actions.
    public var name: String
    public var action: Action
    /// The version the write is based on (0 = must not exist).
    public var baseVersion: Int64?
    /// `"checkStock": true` on a `set` that creates an order: an `issue`
    /// order for more than its item's `stock` is refused with
    /// `insufficient_stock` (PROTOCOL.md, "Creating a workflow record").
    public var checkStock = false

    public init(name: String, action: Action, baseVersion: Int64? = nil) {
        self.name = name
        self.action = action
        self.baseVersion = baseVersion
    }

    public var isListWrite: Bool {
        switch action {
        case .addEntry, .removeEntry, .setEntries, .deleteList: true
        case .set, .setPath, .merge, .delete, .deletePath, .increment, .advance, .boundedIncrement: false
        }
    }
}

/// `{"op":"advance","name":…,"from":…,"to":…,"reason":…,"data":{…}}`.
public struct Advance: Sendable, Equatable {
    /// The stage the client believes the record is in; a mismatch is a conflict.
    public var from: String?
    /// The stage to move to; nil means the first allowed transition.
    public var to: String?
    public var reason: String?
    /// A merge patch applied in the same change.
    public var data: JSONObject?

    public init(from: String? = nil, to: String? = nil, reason: String? = nil, data: JSONObject? = nil) {
        self.from = from
        self.to = to
        self.reason = reason
        self.data = data
    }
}
