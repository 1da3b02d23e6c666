import TallyProtocol

/// A record as the engine sees it: data parsed, plus the bytes it serializes
/// to (kept so storage and pushes never serialize the same data twice).
public struct RecordState: Sendable, Equatable {
    public var name: String
    public var version: Int64
    /// Sequence number of the record's last change.
    public var seq: Int64
    public var created: Int64
    public var updated: Int64
    public var data: JSONObject
    /// `JSONValue.object(data).serialized()`.
    public var dataBytes: [UInt8]

    public init(name: String, version: Int64, seq: Int64, created: Int64, updated: Int64,
                data: JSONObject, dataBytes: [UInt8]) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.data = data
        self.dataBytes = dataBytes
    }
}

extension RecordState {
    /// Who created it, for rules that grant access to one's own records.
    public var owner: String? { data["owner"]?.stringValue }
}

/// A list as the engine sees it: what the list's row holds. The entries
/// themselves are rows with order keys (`ListKey`), read in order through
/// `EngineState.listRows`, never loaded whole.
public struct ListState: Sendable, Equatable {
    public var name: String
    public var version: Int64
    public var seq: Int64
    public var created: Int64
    public var updated: Int64
    /// How many entries it has.
    public var count: Int
    /// The last entry's key (nil: no entries), kept so an append reads no
    /// rows: reading the end of the rows steps over every edit the store
    /// has committed before the core heard of it, a thousand rows and more
    /// while writes of 1,000 appends follow each other.
    public var lastKey: ListKey?

    public init(name: String, version: Int64, seq: Int64, created: Int64, updated: Int64, count: Int,
                lastKey: ListKey?) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.count = count
        self.lastKey = lastKey
    }
}

/// What the engine reads: the current state of the records and lists a
/// command touches, every accepted change included (committed or not). The
/// hub's cache over the store implements it; tests use dictionaries.
public protocol EngineState {
    mutating func record(_ name: String) throws(ProtocolError) -> RecordState?
    mutating func list(_ name: String) throws(ProtocolError) -> ListState?
    /// The entries of list `name` in order (`descending`: from the last),
    /// starting after `after` in that direction when given. Reading the
    /// first row costs O(log n); each next one O(1).
    mutating func listRows(_ name: String, descending: Bool, after: ListKey?) throws(ProtocolError) -> any ListCursor
    /// The keys of the entries of list `name` that equal `entry` bytewise,
    /// ascending.
    mutating func listKeys(_ name: String, holding entry: String) throws(ProtocolError) -> [ListKey]
    /// How many entries of list `name` have a key below `key`, and which of
    /// `keys` it holds, as one reading.
    mutating func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool])
    /// The entry at `index` of list `name`, nil past the end.
    mutating func listRow(_ name: String, at index: Int) throws(ProtocolError) -> ListRow?
}

extension EngineState {
    /// By stepping from the first entry: O(n). A state over a store answers from its counts.
    public mutating func listRank(_ name: String, below key: ListKey,
                                  holding keys: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]) {
        var below = 0
        var present = Set<ListKey>()
        let wanted = Set(keys)
        let cursor = try listRows(name, descending: false, after: nil)
        while let row = try cursor.next() {
            if row.key < key { below += 1 } else if wanted.isEmpty { break }
            if wanted.contains(row.key) { present.insert(row.key) }
        }
        return (below, keys.map(present.contains))
    }

    /// By stepping from the first entry: O(index).
    public mutating func listRow(_ name: String, at index: Int) throws(ProtocolError) -> ListRow? {
        guard index >= 0 else { return nil }
        let cursor = try listRows(name, descending: false, after: nil)
        var passed = 0
        while let row = try cursor.next() {
            if passed == index { return row }
            passed += 1
        }
        return nil
    }
}

/// Limits the engine enforces on what a write produces.
public struct EngineLimits: Sendable, Hashable {
    /// Largest serialized record data, in bytes.
    public var maxRecordBytes = 1 << 20
    /// Most entries one `setEntries` may give (what one message may carry);
    /// `addEntry` has no limit.
    public var maxListEntries = 100_000
    /// Most entries a list's `conflict` error carries; a longer list's
    /// conflict leaves `entries` out (the hub sets its snapshot bound).
    public var maxConflictEntries = 10_000
    /// Deepest nesting of a record's data (the data object is level 1).
    /// Messages carry data inside up to three more levels (a reply, its
    /// `records` array, an envelope) and are parsed with a depth limit of 64,
    /// so a record deeper than this could be written but not read back.
    public var maxRecordDepth = 48

    public init(maxRecordBytes: Int = 1 << 20, maxListEntries: Int = 100_000, maxRecordDepth: Int = 48,
                maxConflictEntries: Int = 10_000) {
        self.maxRecordBytes = maxRecordBytes
        self.maxListEntries = maxListEntries
        self.maxConflictEntries = maxConflictEntries
        self.maxRecordDepth = maxRecordDepth
    }
}
