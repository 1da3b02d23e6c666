/// One list as stored: an ordered list of entry strings (record names, …).
public struct StoredList: Sendable, Equatable {
    public var name: String
    public var version: Int64
    /// The change seq that last wrote this list.
    public var seq: Int64
    /// Milliseconds since the Unix epoch.
    public var created: Int64
    /// Milliseconds since the Unix epoch.
    public var updated: Int64
    public var entries: [String]

    public init(name: String, version: Int64, seq: Int64, created: Int64, updated: Int64, entries: [String]) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.entries = entries
    }
}
