import TallyClient
import TallyProtocol
import TallySQLite

/// A write made on the command line against the mirror.
public enum LocalCommand: Sendable, Equatable {
    /// The whole record (`value` must be an object) or the value at `path`.
    case set(name: String, path: String?, value: JSONValue)
    /// The record, or the value at `path`.
    case delete(name: String, path: String?)

    public var name: String {
        switch self {
        case .set(let name, _, _), .delete(let name, _): name
        }
    }
}

/// What a local write did: applied to the local copy, queued for the hub.
public struct LocalWriteResult: Sendable, Equatable {
    public var name: String
    /// The hub version the local copy is based on, and its seq.
    public var version: Int64
    public var seq: Int64
    /// The outbox entries it added (an `advance` and a `set` when a whole
    /// record's stage changed as well as other fields).
    public var entries: [Int64]
    public var idem: String
    /// Writes now waiting for the hub.
    public var outbox: Int64
    /// The local copy after the write (nil: deleted).
    public var data: JSONObject?
}

/// Turns a command-line write into the protocol writes the outbox will
/// send, refusing at once what the hub would refuse anyway. Pure.
public enum LocalWritePlanner {
    /// - Parameter reason: kept with a stage change (some transitions need
    ///   one, e.g. an intake job's move to `failed`).
    public static func writes(for command: LocalCommand, current: JSONObject?, rule: WorkflowRule?,
                              reason: String? = nil) throws(ProtocolError) -> [JSONObject] {
        let name = command.name
        if name.hasPrefix("stats/") {
            throw ProtocolError(.forbidden, "records under stats/ are kept by the hub; no client may write them",
                                details: ["operation": "write", "name": .string(name)])
        }
        switch command {
        case .set(_, let path?, let value):
            let parsed: RecordPath
            do { parsed = try RecordPath(parsing: path) } catch { throw .path(error) }
            if let rule, current != nil, case .key(let first)? = parsed.segments.first, rule.protectedFields.contains(first) {
                guard first == rule.stageField, parsed.segments.count == 1, case .string(let to) = value else {
                    throw useAdvance(name, first)
                }
                return [try advance(name, current: current, to: to, rule: rule, reason: reason)]
            }
            if current != nil {
                do { _ = try JSONValue.object(current ?? [:]).setting(value, at: parsed) } catch { throw .path(error) }
            }
            return [["op": "set", "name": .string(name), "path": .string(path), "value": value]]
        case .set(_, nil, let value):
            guard case .object(var data) = value else {
                throw ProtocolError.badField("data", "a whole record is a JSON object")
            }
            guard let rule else { return [["op": "set", "name": .string(name), "data": .object(data)]] }
            guard let current else {
                if let stage = data[rule.stageField], stage != rule.stages.first.map(JSONValue.string) {
                    throw ProtocolError(.useAdvance, "a new \(rule.prefix) record starts at stage '\(rule.stages.first ?? "")'; move it on with a stage write afterwards",
                                        details: ["field": .string(rule.stageField)])
                }
                return [["op": "set", "name": .string(name), "data": .object(data)]]
            }
            var writes: [JSONObject] = []
            if let stage = data[rule.stageField], stage != current[rule.stageField] {
                guard case .string(let to) = stage else { throw useAdvance(name, rule.stageField) }
                writes.append(try advance(name, current: current, to: to, rule: rule, reason: reason))
            }
            for field in rule.protectedFields where field != rule.stageField {
                if let given = data[field], given != current[field] { throw useAdvance(name, field) }
            }
            for field in rule.protectedFields { data[field] = nil }
            var kept = current
            for field in rule.protectedFields { kept[field] = nil }
            if writes.isEmpty || data != kept {
                writes.append(["op": "set", "name": .string(name), "data": .object(data)])
            }
            return writes
        case .delete(_, let path?):
            let parsed: RecordPath
            do { parsed = try RecordPath(parsing: path) } catch { throw .path(error) }
            if let rule, case .key(let first)? = parsed.segments.first, rule.protectedFields.contains(first) {
                throw useAdvance(name, first)
            }
            guard let current, JSONValue.object(current).value(at: parsed) != nil else {
                throw ProtocolError(.notFound, "\(name) has no value at \(path) in this mirror")
            }
            return [["op": "delete", "name": .string(name), "path": .string(path)]]
        case .delete(_, nil):
            guard current != nil else { throw ProtocolError(.notFound, "\(name) is not in this mirror") }
            return [["op": "delete", "name": .string(name)]]
        }
    }

    static func advance(_ name: String, current: JSONObject?, to: String, rule: WorkflowRule,
                        reason: String?) throws(ProtocolError) -> JSONObject {
        guard let from = current?[rule.stageField]?.stringValue else {
            throw ProtocolError(.notFound, "\(name) has no stage in this mirror")
        }
        guard rule.allows(from: from, to: to) else {
            let allowed = rule.transitions[from] ?? []
            throw ProtocolError(.illegalTransition,
                                "\(name) cannot move from '\(from)' to '\(to)'; allowed: \(allowed.isEmpty ? "none (terminal)" : allowed.joined(separator: ", "))",
                                details: ["name": .string(name), "from": .string(from), "to": .string(to),
                                          "allowed": .array(allowed.map(JSONValue.string))])
        }
        var advance: JSONObject = ["op": "advance", "name": .string(name), "from": .string(from), "to": .string(to)]
        if let reason { advance["reason"] = .string(reason) }
        return advance
    }

    static func useAdvance(_ name: String, _ field: String) -> ProtocolError {
        ProtocolError(.useAdvance, "\(field) of \(name) is kept by its workflow: change the stage with 'tally mirror set \(name) stage STAGE'",
                      details: ["field": .string(field)])
    }
}

/// Why a mirror command could not do what it was asked.
public enum MirrorError: Error, CustomStringConvertible {
    /// Refused before anything changed (the message says what to fix).
    case refused(ProtocolError)
    case store(MirrorStoreError)

    public var description: String {
        switch self {
        case .refused(let error): "\(error.message) (\(error.code))"
        case .store(let error): error.message
        }
    }

    /// What a store transaction that may end in a refusal threw: the
    /// store's failure, or the refusal it returned (`Result.get()`).
    init(_ error: any Error) {
        switch error {
        case let error as MirrorStoreError: self = .store(error)
        case let error as ProtocolError: self = .refused(error)
        default: self = .store(MirrorStoreError("\(error)"))
        }
    }
}

extension MirrorStore {
    /// Applies a write to the local copy at once and appends it to the
    /// outbox, in one transaction.
    /// - Parameters:
    ///   - ifVersion: refuse unless the local copy is based on this hub
    ///     version (0: the hub has no such record as far as the mirror knows).
    ///   - idem: the idempotency key (default: a fresh random one); a key
    ///     already in the outbox changes nothing and answers that write.
    ///   - reason: kept with a stage change (`advance`'s `reason`).
    public func write(_ command: LocalCommand, ifVersion: Int64? = nil, idem: String? = nil,
                      reason: String? = nil) throws(MirrorError) -> LocalWriteResult {
        do {
            return try transaction { () throws(MirrorStoreError) -> Result<LocalWriteResult, ProtocolError> in
                let catalog = try workflows()
                let name = command.name
                let rule = catalog.rule(for: name)
                let row = try record(name)
                let version = row?.version ?? 0
                let key = idem ?? "mirror-\(Self.randomKey())"
                if let idem, try hasEntry(idem: idem) {
                    let ids = try db.query("SELECT id FROM outbox WHERE idem = ? OR idem LIKE ?", [.text(idem), .text("\(idem)#%")])
                        .compactMap { $0.first?.int }
                    return .success(LocalWriteResult(name: name, version: version, seq: row?.seq ?? 0, entries: ids, idem: idem,
                                                     outbox: try outboxDepth(), data: row?.data))
                }
                if let ifVersion, ifVersion != version {
                    return .failure(ProtocolError(.conflict, "the mirror's copy of \(name) is based on version \(version), not \(ifVersion)",
                                                  details: ["version": .int(version)]))
                }
                let writes: [JSONObject]
                do throws(ProtocolError) {
                    writes = try LocalWritePlanner.writes(for: command, current: row?.data, rule: rule, reason: reason)
                } catch {
                    return .failure(error)
                }
                var view = row?.data
                var ids: [Int64] = []
                for (index, write) in writes.enumerated() {
                    let entryKey = index == 0 ? key : "\(key)#\(index + 1)"
                    ids.append(try insertEntry(name: name, op: write, idem: entryKey, baseVersion: version, base: view))
                    view = LocalEffect.apply(write, to: view, rule: rule)
                }
                try putRecord(MirrorRecord(name: name, version: version, seq: row?.seq ?? 0, data: view, base: row?.base,
                                           updated: Self.now()))
                return .success(LocalWriteResult(name: name, version: version, seq: row?.seq ?? 0, entries: ids, idem: key,
                                                 outbox: try outboxDepth(), data: view))
            }.get()
        } catch {
            throw MirrorError(error)
        }
    }
}
