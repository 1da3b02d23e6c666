import TallyProtocol

/// A record as the hub sends it: `{"name","version","seq","created","updated","data"}`.
public struct RecordEnvelope: Sendable, Equatable {
    public var name: String
    /// 1 when created, +1 per accepted write.
    public var version: Int64
    /// The hub-wide sequence number of the record's last change.
    public var seq: Int64
    /// Milliseconds since the epoch; absent when only a push was seen.
    public var created: Int64?
    public var updated: Int64?
    public var data: JSONObject

    public init(name: String, version: Int64, seq: Int64, created: Int64? = nil, updated: Int64? = nil, data: JSONObject) {
        self.name = name
        self.version = version
        self.seq = seq
        self.created = created
        self.updated = updated
        self.data = data
    }

    /// Reads an envelope; nil when a required member is missing.
    public init?(json: JSONObject) {
        guard let name = json["name"]?.stringValue, let version = json["version"]?.int64,
              let seq = json["seq"]?.int64 else { return nil }
        self.init(name: name, version: version, seq: seq, created: json["created"]?.int64,
                  updated: json["updated"]?.int64, data: json["data"]?.objectValue ?? [:])
    }

    public var json: JSONObject {
        var object: JSONObject = ["name": .string(name), "version": .int(version), "seq": .int(seq), "data": .object(data)]
        if let created { object["created"] = .int(created) }
        if let updated { object["updated"] = .int(updated) }
        return object
    }
}

/// A list as the hub sends it: `{"list","version","seq","entries"}`.
public struct ListEnvelope: Sendable, Equatable {
    public var name: String
    public var version: Int64
    public var seq: Int64
    public var entries: [String]

    public init(name: String, version: Int64, seq: Int64, entries: [String]) {
        self.name = name
        self.version = version
        self.seq = seq
        self.entries = entries
    }

    public init?(json: JSONObject) {
        guard let name = (json["list"] ?? json["name"])?.stringValue, let version = json["version"]?.int64,
              let seq = json["seq"]?.int64 else { return nil }
        self.init(name: name, version: version, seq: seq,
                  entries: (json["entries"]?.arrayValue ?? []).compactMap(\.stringValue))
    }
}

/// The reply to one accepted write.
public struct WriteResult: Sendable, Equatable {
    /// The record's or list's name.
    public var name: String
    public var isList: Bool
    /// The version the write produced.
    public var version: Int64
    public var seq: Int64
    /// `increment`: the new number.
    public var value: JSONValue?
    /// `advance`: the stages moved between.
    public var from: String?
    public var to: String?
    /// The whole reply, for members this type does not name.
    public var reply: JSONObject

    public init?(json: JSONObject) {
        let list = json["list"]?.stringValue
        guard let name = list ?? json["name"]?.stringValue, let version = json["version"]?.int64,
              let seq = json["seq"]?.int64 else { return nil }
        self.name = name
        isList = list != nil
        self.version = version
        self.seq = seq
        value = json["value"]
        from = json["from"]?.stringValue
        to = json["to"]?.stringValue
        reply = json
    }
}

/// The reply to an atomic `write`: one result per operation.
public struct AtomicWriteResult: Sendable, Equatable {
    /// The last seq of the change set.
    public var seq: Int64
    public var results: [WriteResult]
}

/// One page of a prefix read, in name order.
public struct PrefixPage: Sendable, Equatable {
    /// The hub's head seq when it read the page.
    public var seq: Int64
    public var records: [RecordEnvelope]
    /// More records follow the last one: ask again with `after`.
    public var more: Bool
}

extension JSONValue {
    /// An integer number as Int64 (nil for anything else).
    public var int64: Int64? { numberValue?.int64Value }

    /// An integer as a JSON number.
    public static func int(_ value: Int64) -> JSONValue { .number(JSONNumber(value)) }
}
