import TallyProtocol

/// The pure core: applies writes to the current state and returns the
/// changes — the new states, the bytes to persist and push, the reply — with
/// no I/O. The caller decides when the changes become visible (after commit).
///
/// Writes in one call are atomic: each sees the effect of the ones before it,
/// and if any fails none is returned.
public struct Engine: Sendable {
    public var limits: EngineLimits

    public init(limits: EngineLimits = EngineLimits()) { self.limits = limits }

    /// Applies `writes` in order. `firstSeq` is the sequence number the first
    /// change gets; each later change gets the next one. For an atomic group
    /// an error carries the failing write's `index` — or, with `origins`,
    /// the index of the client write the failing one was planned from.
    public func apply(_ writes: [Write], atomic: Bool, origins: [Int]? = nil, to state: inout some EngineState,
                      firstSeq: Int64, now: Int64) throws(ProtocolError) -> [Change] {
        var overlay = Overlay(base: state)
        var changes: [Change] = []
        changes.reserveCapacity(writes.count)
        for (index, write) in writes.enumerated() {
            do throws(ProtocolError) {
                let seq = firstSeq + Int64(changes.count)
                let change = write.isListWrite
                    ? try applyList(write, in: &overlay, seq: seq, now: now)
                    : try applyRecord(write, current: overlay.record(write.name), seq: seq, now: now)
                overlay.remember(change)
                changes.append(change)
            } catch {
                var error = error
                if atomic {
                    let index = origins?[index] ?? index
                    error.details["index"] = .number(JSONNumber(index))
                    if case .string(let field)? = error.details["field"] {
                        error.details["field"] = .string("ops[\(index)].\(field)")
                    }
                }
                throw error
            }
        }
        state = overlay.base
        return changes
    }

    // MARK: Records

    func applyRecord(_ write: Write, current: RecordState?, seq: Int64, now: Int64) throws(ProtocolError) -> Change {
        let name = write.name
        if let base = write.baseVersion, base != (current?.version ?? 0) {
            throw Self.conflict(name: name, field: "name", version: current?.version ?? 0,
                                current: current.map { .object($0.data) }, currentKey: "data", base: base)
        }
        func missing() -> ProtocolError {
            ProtocolError(.notFound, "no record named \"\(name)\"")
        }
        let root = JSONValue.object(current?.data ?? [:])
        var scope = Change.RecordScope.whole
        var kind: StaticString = "set"
        var pathValue: (RecordPath, JSONValue?)?
        var replyValue: JSONValue?
        // Refusals that depend only on what exists, before any path work.
        switch write.action {
        case .merge, .delete:
            guard current != nil else { throw missing() }
        case .deletePath(let path):
            guard current != nil else { throw missing() }
            guard root.value(at: path) != nil else {
                throw ProtocolError(.notFound, "\"\(name)\" has no value at \(path)", details: ["field": "path"])
            }
        case .boundedIncrement(let path, let by, let atLeast):
            guard current != nil else { throw missing() }
            let before = root.value(at: path)?.numberValue?.int64Value ?? 0
            let (sum, overflow) = before.addingReportingOverflow(by)
            guard !overflow, sum >= atLeast else {
                throw ProtocolError(.insufficientStock,
                    "\"\(name)\" has \(path) \(before); this change needs \(-by), which would leave \(sum)",
                    details: ["item": .string(name), "stock": .number(JSONNumber(before)), "needed": .number(JSONNumber(-by))])
            }
        case .advance:
            throw ProtocolError(.badField, "\"\(name)\" is not under a workflow, so it has no stages to advance",
                                details: ["field": "name"])
        case .set, .setPath, .increment, .addEntry, .removeEntry, .setEntries, .deleteList:
            break
        }
        let newData: JSONObject?
        do throws(RecordPathError) {
            switch write.action {
            case .set(let data):
                newData = data
            case .merge(let patch):
                newData = (current?.data ?? [:]).mergePatched(with: patch)
            case .setPath(let path, let value):
                newData = try root.setting(value, at: path).objectValue
                scope = .path(path); kind = "setPath"; pathValue = (path, value)
            case .increment(let path, let by):
                let result = try root.incrementing(at: path, by: by)
                let value = result.value(at: path)
                newData = result.objectValue
                scope = .path(path); kind = "setPath"; pathValue = (path, value); replyValue = value
            case .boundedIncrement(let path, let by, _):
                let result = try root.incrementing(at: path, by: JSONNumber(by))
                let value = result.value(at: path)
                newData = result.objectValue
                scope = .path(path); kind = "setPath"; pathValue = (path, value); replyValue = value
            case .deletePath(let path):
                newData = try root.removing(at: path).objectValue
                scope = .path(path); kind = "deletePath"; pathValue = (path, nil)
            case .delete:
                newData = nil
                kind = "delete"
            case .addEntry, .removeEntry, .setEntries, .deleteList, .advance:
                preconditionFailure("list write or unplanned advance routed to applyRecord")
            }
        } catch {
            throw ProtocolError.path(error)
        }

        let version = (current?.version ?? 0) + 1
        var after: RecordState?
        var push = MessageWriter(capacity: 96 + (current?.dataBytes.count ?? 0))
        push.string("op", "change")
        push.int("seq", seq)
        push.int("time", now)
        push.string("name", name)
        push.int("version", version)
        push.string("kind", String(describing: kind))
        if let newData {
            let depth = JSONValue.object(newData).depth
            guard depth <= limits.maxRecordDepth else {
                throw ProtocolError(.tooLarge, "\"\(name)\" would nest \(depth) levels deep; the limit is \(limits.maxRecordDepth)",
                                    details: ["limit": .number(JSONNumber(limits.maxRecordDepth))])
            }
            let bytes = JSONValue.object(newData).serialized()
            guard bytes.count <= limits.maxRecordBytes else {
                throw ProtocolError(.tooLarge, "\"\(name)\" would be \(bytes.count) bytes; the limit is \(limits.maxRecordBytes)",
                                    details: ["limit": .number(JSONNumber(limits.maxRecordBytes))])
            }
            after = RecordState(name: name, version: version, seq: seq, created: current?.created ?? now,
                                updated: now, data: newData, dataBytes: bytes)
            if let (path, value) = pathValue {
                push.string("path", path.description)
                if let value { push.value("value", value) }
            } else {
                push.raw("data", bytes)
            }
        }
        var reply: JSONObject = ["name": .string(name), "version": .number(JSONNumber(version)),
                                 "seq": .number(JSONNumber(seq))]
        if let replyValue { reply["value"] = replyValue }
        return Change(seq: seq, time: now, name: name,
                      target: .record(before: current, after: after, scope: scope),
                      push: push.finish(), reply: reply)
    }

    // MARK: Lists

    func applyList(_ write: Write, in overlay: inout Overlay<some EngineState>, seq: Int64, now: Int64) throws(ProtocolError) -> Change {
        let name = write.name
        let current = try overlay.list(name)
        let count = current?.count ?? 0
        if let base = write.baseVersion, base != (current?.version ?? 0) {
            // A long list's entries would make the error as long: carried
            // only up to the snapshot bound (PROTOCOL.md, "Errors").
            var entries: JSONValue?
            if current != nil, count <= limits.maxConflictEntries {
                entries = .array(try overlay.rows(name, from: 0, count: count).map { .string($0.entry) })
            }
            throw Self.conflict(name: name, field: "list", version: current?.version ?? 0,
                                current: entries, currentKey: "entries", base: base)
        }
        func missing() -> ProtocolError { ProtocolError(.notFound, "no list named \"\(name)\"") }
        func exhausted() -> ProtocolError { // after 2^63 appends (or prepends) at one end
            ProtocolError(.tooLarge, "\"\(name)\" has no order key left at that end",
                          details: ["limit": .number(JSONNumber(Int64.max))])
        }
        let version = (current?.version ?? 0) + 1
        var newCount = count
        var lastKey = current?.lastKey
        let edit: ListEdit
        var push = MessageWriter()
        push.string("op", "change")
        push.int("seq", seq)
        push.int("time", now)
        push.string("list", name)
        push.int("version", version)
        switch write.action {
        case .addEntry(let entry, let at):
            let index = at ?? count
            guard index <= count else {
                throw .badField("at", "\"at\" is \(index) but \"\(name)\" has \(count) entries; use 0…\(count)")
            }
            let key: ListKey?
            if count == 0 {
                key = .first
            } else if index == count {
                key = current?.lastKey?.after()
            } else if index == 0 {
                key = try overlay.listRows(name, descending: false, after: nil).next()?.key.before()
            } else {
                let pair = try overlay.rows(name, from: index - 1, count: 2)
                key = ListKey.between(pair[0].key, pair[1].key)
            }
            guard let key else { throw exhausted() }
            if index == count { lastKey = key }
            edit = .insert(ListRow(key: key, entry: entry))
            newCount += 1
            push.string("kind", "addEntry")
            push.string("entry", entry)
            push.int("index", Int64(index))
        case .removeEntry(let entry, let at):
            guard current != nil else { throw missing() }
            var removed: [(index: Int, key: ListKey)] = []
            if let at {
                let row = at < count ? try overlay.rows(name, from: at, count: 1).first : nil
                guard let row, row.entry.sameBytes(as: entry) else {
                    throw ProtocolError(.notFound, "\"\(name)\" has no \"\(entry)\" at index \(at)")
                }
                removed = [(at, row.key)]
            } else {
                let keys = try overlay.listKeys(name, holding: entry)
                guard !keys.isEmpty else { throw ProtocolError(.notFound, "\"\(name)\" has no entry \"\(entry)\"") }
                for key in keys { removed.append((try overlay.listRank(name, below: key, holding: []).below, key)) }
                removed.sort { $0.index < $1.index }
            }
            edit = .remove(removed.map(\.key))
            newCount -= removed.count
            if let last = lastKey, removed.contains(where: { $0.key == last }) {
                // The last entry went: the new last is the first from the end that stays.
                let gone = Set(removed.map(\.key))
                lastKey = newCount == 0 ? nil
                    : try Self.firstKey(of: overlay.listRows(name, descending: true, after: nil), skipping: gone)
            }
            push.string("kind", "removeEntry")
            push.string("entry", entry)
            push.value("indexes", .array(removed.map { .number(JSONNumber($0.index)) }))
        case .setEntries(let newEntries):
            guard newEntries.count <= limits.maxListEntries else {
                throw ProtocolError(.tooLarge, "\(newEntries.count) entries; the limit is \(limits.maxListEntries)",
                                    details: ["limit": .number(JSONNumber(limits.maxListEntries))])
            }
            edit = .replace(newEntries.enumerated().map { ListRow(key: ListKey(integer: Int64($0.offset)), entry: $0.element) })
            newCount = newEntries.count
            lastKey = newEntries.isEmpty ? nil : ListKey(integer: Int64(newEntries.count - 1))
            push.string("kind", "setEntries")
            push.value("entries", .array(newEntries.map(JSONValue.string)))
        case .deleteList:
            guard current != nil else { throw missing() }
            edit = .delete
            push.string("kind", "delete")
        case .set, .setPath, .merge, .delete, .deletePath, .increment, .advance, .boundedIncrement:
            preconditionFailure("record write routed to applyList")
        }
        let after = edit == .delete ? nil : ListState(name: name, version: version, seq: seq, created: current?.created ?? now,
                                                      updated: now, count: newCount, lastKey: lastKey)
        let reply: JSONObject = ["list": .string(name), "version": .number(JSONNumber(version)),
                                 "seq": .number(JSONNumber(seq))]
        return Change(seq: seq, time: now, name: name, target: .list(before: current, after: after, edit: edit),
                      push: push.finish(), reply: reply)
    }

    /// The first row's key that is not in `gone`.
    static func firstKey(of cursor: any ListCursor, skipping gone: Set<ListKey>) throws(ProtocolError) -> ListKey? {
        while let row = try cursor.next() {
            if !gone.contains(row.key) { return row.key }
        }
        return nil
    }

    static func conflict(name: String, field: String, version: Int64, current: JSONValue?, currentKey: String,
                         base: Int64) -> ProtocolError {
        var details: JSONObject = [field: .string(name), "version": .number(JSONNumber(version))]
        if let current { details[currentKey] = current }
        let state = version == 0 ? "does not exist" : "is at version \(version)"
        return ProtocolError(.conflict, "\"\(name)\" \(state), not \(base); read it again and retry", details: details)
    }
}

/// The state as seen inside one atomic group: earlier writes' results over
/// the caller's state, which is only read. A list's rows edited earlier in
/// the group are `ListEdits` laid over the caller's rows.
struct Overlay<Base: EngineState> {
    var base: Base
    private var records: [ByteKey: RecordState?] = [:]
    private var lists: [ByteKey: ListState?] = [:]
    private var listEdits: [ByteKey: ListEdits] = [:]

    init(base: Base) { self.base = base }

    mutating func record(_ name: String) throws(ProtocolError) -> RecordState? {
        if let known = records[ByteKey(name)] { return known }
        return try base.record(name)
    }

    mutating func list(_ name: String) throws(ProtocolError) -> ListState? {
        if let known = lists[ByteKey(name)] { return known }
        return try base.list(name)
    }

    mutating func listRows(_ name: String, descending: Bool, after: ListKey?) throws(ProtocolError) -> any ListCursor {
        let rows = try base.listRows(name, descending: descending, after: after)
        guard let edits = listEdits[ByteKey(name)] else { return rows }
        return edits.cursor(over: rows, descending: descending, after: after)
    }

    mutating func listKeys(_ name: String, holding entry: String) throws(ProtocolError) -> [ListKey] {
        let keys = try base.listKeys(name, holding: entry)
        guard let edits = listEdits[ByteKey(name)] else { return keys }
        return edits.keys(holding: entry, baseKeys: keys)
    }

    mutating func listRank(_ name: String, below key: ListKey,
                           holding keys: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]) {
        guard let edits = listEdits[ByteKey(name)] else { return try base.listRank(name, below: key, holding: keys) }
        return try edits.rank(below: key, holding: keys) { keys throws(ProtocolError) in
            try base.listRank(name, below: key, holding: keys)
        }
    }

    mutating func listRow(_ name: String, at index: Int) throws(ProtocolError) -> ListRow? {
        guard let edits = listEdits[ByteKey(name)] else { return try base.listRow(name, at: index) }
        return try edits.row(at: index,
                             baseRow: { index throws(ProtocolError) in try base.listRow(name, at: index) },
                             rank: { key throws(ProtocolError) in
                                 let ranked = try listRank(name, below: key, holding: [key])
                                 return (ranked.below, ranked.held[0])
                             },
                             rows: { after throws(ProtocolError) in try listRows(name, descending: false, after: after) })
    }

    /// `count` rows from index `from`: the first found by rank, the rest
    /// stepped to.
    mutating func rows(_ name: String, from: Int, count: Int) throws(ProtocolError) -> [ListRow] {
        var rows: [ListRow] = []
        if count > 0, let first = try listRow(name, at: from) {
            rows.append(first)
            let cursor = try listRows(name, descending: false, after: first.key)
            while rows.count < count, let row = try cursor.next() { rows.append(row) }
        }
        guard rows.count == count else {
            throw ProtocolError(.storageFailed, "list \"\(name)\" has fewer rows than its count")
        }
        return rows
    }

    mutating func remember(_ change: Change) {
        switch change.target {
        case .record(_, let after, _): records[ByteKey(change.name)] = .some(after)
        case .list(_, let after, let edit):
            lists[ByteKey(change.name)] = .some(after)
            listEdits[ByteKey(change.name), default: ListEdits()].apply(edit, seq: change.seq)
        }
    }
}
