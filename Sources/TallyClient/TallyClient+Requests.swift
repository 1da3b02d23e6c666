import TallyProtocol

/// Typed requests: each builds the protocol message, waits for the reply
/// and returns it as a value, or throws the hub's refusal (or a transport
/// failure) as a `ProtocolError`.
extension TallyClient {
    /// A record; `not_found` when it does not exist.
    public func get(_ name: String) async throws(ProtocolError) -> RecordEnvelope {
        let reply = try await request(["op": "get", "name": .string(name)])
        guard let envelope = RecordEnvelope(json: reply) else { throw Self.unreadable(reply) }
        return envelope
    }

    /// The value at `path` in a record; `not_found` when there is none.
    public func get(_ name: String, path: String) async throws(ProtocolError) -> JSONValue {
        let reply = try await request(["op": "get", "name": .string(name), "path": .string(path)])
        return reply["value"] ?? .null
    }

    /// A list with every entry: page after page when it is longer than
    /// one (a reply carries at most 10,000 entries).
    public func getList(_ name: String) async throws(ProtocolError) -> ListEnvelope {
        var page = try await getListPage(name)
        var envelope = page.list
        while let cursor = page.cursor {
            page = try await getListPage(name, cursor: cursor)
            envelope.entries += page.list.entries
            (envelope.version, envelope.seq) = (page.list.version, page.list.seq)
        }
        return envelope
    }

    /// One page of a list's entries: after `cursor` (a previous page's),
    /// at most `limit` (default 10,000); `cursor` in the result is the next
    /// page's, nil at the end. Pages read at different times may disagree
    /// (a list that changed in between): `getList` is for a list that is not
    /// being written, a list subscription for one that is.
    public func getListPage(_ name: String, cursor: String? = nil, limit: Int? = nil) async throws(ProtocolError)
        -> (list: ListEnvelope, cursor: String?) {
        var message: JSONObject = ["op": "get", "list": .string(name)]
        if let cursor { message["cursor"] = .string(cursor) }
        if let limit { message["limit"] = .int(Int64(limit)) }
        let reply = try await request(message)
        guard let envelope = ListEnvelope(json: reply) else { throw Self.unreadable(reply) }
        return (envelope, reply["more"] == .bool(true) ? reply["cursor"]?.stringValue : nil)
    }

    /// One page of the records under `prefix`, in name order, after `after`.
    public func getPrefix(_ prefix: String, after: String? = nil, limit: Int = 1000) async throws(ProtocolError) -> PrefixPage {
        var message: JSONObject = ["op": "get", "prefix": .string(prefix), "limit": .int(Int64(limit))]
        if let after { message["after"] = .string(after) }
        let reply = try await request(message)
        let records = (reply["records"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RecordEnvelope.init(json:)) }
        return PrefixPage(seq: reply["seq"]?.int64 ?? 0, records: records, more: reply["more"] == .bool(true))
    }

    /// Every record under `prefix` (all pages).
    public func list(prefix: String) async throws(ProtocolError) -> [RecordEnvelope] {
        var records: [RecordEnvelope] = []
        var after: String?
        while true {
            let page = try await getPrefix(prefix, after: after)
            records += page.records
            guard page.more, let last = page.records.last else { return records }
            after = last.name
        }
    }

    /// One write; `idem` makes a retry apply once.
    public func write(_ operation: WriteOperation, idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        var message = operation.json
        if let idem { message["idem"] = .string(idem) }
        let reply = try await request(message)
        guard let result = WriteResult(json: reply) else { throw Self.unreadable(reply) }
        return result
    }

    /// Several writes applied atomically (all or none).
    public func write(atomic operations: [WriteOperation], idem: String? = nil) async throws(ProtocolError) -> AtomicWriteResult {
        var message: JSONObject = ["op": "write", "ops": .array(operations.map { .object($0.json) })]
        if let idem { message["idem"] = .string(idem) }
        let reply = try await request(message)
        let results = (reply["results"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(WriteResult.init(json:)) }
        return AtomicWriteResult(seq: reply["seq"]?.int64 ?? 0, results: results)
    }

    public func set(_ name: String, data: JSONObject, version: Int64? = nil, idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.set(name, data: data, version: version), idem: idem)
    }

    public func set(_ name: String, path: String, value: JSONValue, version: Int64? = nil,
                    idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.set(name, path: path, value: value, version: version), idem: idem)
    }

    public func merge(_ name: String, patch: JSONObject, version: Int64? = nil, idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.merge(name, patch: patch, version: version), idem: idem)
    }

    public func delete(_ name: String, path: String? = nil, version: Int64? = nil,
                       idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.delete(name, path: path, version: version), idem: idem)
    }

    public func increment(_ name: String, path: String, by amount: JSONNumber = JSONNumber(1), version: Int64? = nil,
                          idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.increment(name, path: path, by: amount, version: version), idem: idem)
    }

    public func advance(_ name: String, from: String? = nil, to: String? = nil, reason: String? = nil,
                        data: JSONObject? = nil, version: Int64? = nil, idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.advance(name, from: from, to: to, reason: reason, data: data, version: version), idem: idem)
    }

    public func addEntry(_ list: String, entry: String, at index: Int? = nil, version: Int64? = nil,
                         idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.addEntry(list, entry: entry, at: index, version: version), idem: idem)
    }

    public func removeEntry(_ list: String, entry: String, at index: Int? = nil, version: Int64? = nil,
                            idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.removeEntry(list, entry: entry, at: index, version: version), idem: idem)
    }

    public func setEntries(_ list: String, entries: [String], version: Int64? = nil,
                           idem: String? = nil) async throws(ProtocolError) -> WriteResult {
        try await write(.setEntries(list, entries: entries, version: version), idem: idem)
    }

    /// Publishes an event; returns how many connections it was sent to.
    public func publish(topic: String, data: JSONValue) async throws(ProtocolError) -> Int {
        let reply = try await request(["op": "publish", "topic": .string(topic), "data": data])
        return Int(reply["delivered"]?.int64 ?? 0)
    }

    static func unreadable(_ reply: JSONObject) -> ProtocolError {
        ProtocolError(.badReply, "the hub's reply lacks members this client needs: \(JSONValue.object(reply).serializedString.prefix(200))")
    }
}
