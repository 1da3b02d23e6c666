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
}

public struct Hello: Sendable, Equatable {
    /// Versions the client speaks, in any order.
    public var protocols: [Int]
    public var client: String?
    public var token: String?
    public var since: Int64?

    public init(protocols: [Int], client: String? = nil, token: String? = nil, since: Int64? = nil) {
        self.protocols = protocols
        self.client = client
        self.token = token
        self.since = since
    }
}

public enum GetTarget: Sendable, Equatable {
    case record(String, path: RecordPath?)
    case list(String)
    case prefix(String, after: String?, limit: Int)
}

public enum SubscriptionTarget: Sendable, Hashable {
    case record(String)
    case path(String, RecordPath)
    case list(String)
    case prefix(String)
    case topic(String)
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
    }

    /// The record's name, or the list's for list actions.
    public var name: String
    public var action: Action
    /// The version the write is based on (0 = must not exist).
    public var baseVersion: Int64?

    public init(name: String, action: Action, baseVersion: Int64? = nil) {
        self.name = name
        self.action = action
        self.baseVersion = baseVersion
    }

    public var isListWrite: Bool {
        switch action {
        case .addEntry, .removeEntry, .setEntries, .deleteList: true
        case .set, .setPath, .merge, .delete, .deletePath, .increment: false
        }
    }
}
