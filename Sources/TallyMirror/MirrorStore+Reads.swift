import TallyClient
import TallyProtocol

/// What `mirror get` and `mirror ls` read, and the JSON they answer with.
extension MirrorStore {
    /// The local copy of a record (its writes still in the outbox applied)
    /// and whether writes to it wait for the hub; a record the mirror lacks
    /// is refused with `not_found`.
    public func localCopy(_ name: String) throws(MirrorError) -> LocalCopy {
        do {
            guard let record = try record(name), let data = record.data else {
                throw MirrorError.refused(ProtocolError(.notFound, "\(name) is not in the mirror \(self.path)"))
            }
            return LocalCopy(record: record, data: data, pending: try !pendingEntries(name: name).isEmpty)
        } catch let error as MirrorError {
            throw error
        } catch {
            throw MirrorError(error)
        }
    }

    /// The names of the records with writes waiting for the hub.
    public func pendingNames() throws(MirrorStoreError) -> Set<String> {
        Set(try pendingEntries(after: 0, limit: Int.max).map(\.name))
    }
}

/// A record as `mirror get` shows it.
public struct LocalCopy: Sendable {
    public var record: MirrorRecord
    public var data: JSONObject
    /// Writes to it wait in the outbox.
    public var pending: Bool

    /// The value at a path (`text` as given), refused with `not_found` when there is none.
    public func value(at path: RecordPath, text: String) throws(MirrorError) -> JSONValue {
        guard let value = JSONValue.object(data).value(at: path) else {
            throw .refused(ProtocolError(.notFound, "\(record.name) has no value at \(text) in the mirror"))
        }
        return value
    }
}

extension MirrorRecord {
    /// `mirror ls --json`'s entry.
    public func json(pending: Bool) -> JSONObject {
        ["name": .string(name), "version": .int(version), "seq": .int(seq), "data": .object(data ?? [:]),
         "pending": .bool(pending)]
    }
}

extension MirrorList {
    /// `mirror ls --lists --json`'s entry.
    public var json: JSONObject {
        ["list": .string(name), "version": .int(version), "seq": .int(seq), "entries": .array(entries.map(JSONValue.string))]
    }
}

extension LocalWriteResult {
    /// `mirror set|del --json`.
    public var json: JSONObject {
        var body: JSONObject = ["name": .string(name), "version": .int(version), "seq": .int(seq), "pending": true,
                                "outbox": .int(outbox), "idem": .string(idem), "entries": .array(entries.map { .int($0) })]
        if let data { body["data"] = .object(data) }
        return body
    }
}
