/// One record as stored: its JSON object text and the bookkeeping the hub
/// keeps beside it.
public struct StoredRecord: Sendable, Equatable {
    public var name: String
    public var version: Int64
    /// The change seq that last wrote this record.
    public var seq: Int64
    /// Milliseconds since the Unix epoch.
    public var created: Int64
    /// Milliseconds since the Unix epoch.
    public var updated: Int64
    /// Canonical JSON object text (UTF-8); the store never parses it.
    public var data: [UInt8]

    public init(name: String, version: Int64, seq: Int64, created: Int64, updated: Int64, data: [UInt8]) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.data = data
    }
}
