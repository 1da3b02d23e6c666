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

    public init(seq: Int64, time: Int64, kind: EntityKind, name: String, message: [UInt8]) {
        self.seq = seq
        self.time = time
        self.kind = kind
        self.name = name
        self.message = message
    }
}
