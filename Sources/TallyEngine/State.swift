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

public struct ListState: Sendable, Equatable {
    public var name: String
    public var version: Int64
    public var seq: Int64
    public var created: Int64
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

/// What the engine reads: the current state of the records and lists a
/// command touches. The hub's cache over the store implements it; tests use
/// dictionaries.
public protocol EngineState {
    mutating func record(_ name: String) throws(ProtocolError) -> RecordState?
    mutating func list(_ name: String) throws(ProtocolError) -> ListState?
}

/// Limits the engine enforces on what a write produces.
public struct EngineLimits: Sendable, Hashable {
    /// Largest serialized record data, in bytes.
    public var maxRecordBytes = 1 << 20
    /// Most entries in one list.
    public var maxListEntries = 100_000
    /// Deepest nesting of a record's data (the data object is level 1).
    /// Messages carry data inside up to three more levels (a reply, its
    /// `records` array, an envelope) and are parsed with a depth limit of 64,
    /// so a record deeper than this could be written but not read back.
    public var maxRecordDepth = 48

    public init(maxRecordBytes: Int = 1 << 20, maxListEntries: Int = 100_000, maxRecordDepth: Int = 48) {
        self.maxRecordBytes = maxRecordBytes
        self.maxListEntries = maxListEntries
        self.maxRecordDepth = maxRecordDepth
    }
}
