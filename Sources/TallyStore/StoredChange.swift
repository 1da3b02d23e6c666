/// What a change is about.
public enum EntityKind: String, Sendable, Equatable, CaseIterable {
    case record
    case list
}

/// One entry of the change log: the push message that announced a change,
/// kept so that a client resuming from an older seq gets the same bytes again.
public struct StoredChange: Sendable, Equatable {
    /// Unique and ascending in commit order (the hub assigns it).
    public var seq: Int64
    /// Milliseconds since the Unix epoch; age-based retention compares it
    /// with the store's clock.
    public var time: Int64
    public var kind: EntityKind
    public var name: String
    /// The exact push message JSON, replayed byte for byte.
    public var message: [UInt8]
    /// A record change's record as it was before the change (nil: it did
    /// not exist, or a list change). Only a store that several hubs share
    /// keeps it (`SharedStore`): another hub replays the change against it
    /// to learn what the change did to path subscriptions, live queries and
    /// workflow stats, whether or not it holds the record.
    public var prior: StoredRecord?

    public init(seq: Int64, time: Int64, kind: EntityKind, name: String, message: [UInt8],
                prior: StoredRecord? = nil) {
        self.seq = seq
        self.time = time
        self.kind = kind
        self.name = name
        self.message = message
        self.prior = prior
    }
}
