import TallyProtocol

/// One list's row as stored: its version, seq, times and entry count. The
/// entries are rows of their own (`list_entries`), each with an order key.
public struct StoredList: Sendable, Equatable {
    public var name: String
    public var version: Int64
    /// The change seq that last wrote this list.
    public var seq: Int64
    /// Milliseconds since the Unix epoch.
    public var created: Int64
    /// Milliseconds since the Unix epoch.
    public var updated: Int64
    /// How many entries it has.
    public var count: Int64

    public init(name: String, version: Int64, seq: Int64, created: Int64, updated: Int64, count: Int64) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.count = count
    }
}

/// A list's entries read in key order from one end, one at a time. Not
/// Sendable: used by the reader's owner thread, and dropped (or read to the
/// end) before the reader is used for anything that outlives it.
public protocol StoredListCursor: AnyObject {
    func next() throws(StoreError) -> ListRow?
}
