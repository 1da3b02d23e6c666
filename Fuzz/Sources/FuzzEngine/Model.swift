// An independent model of the sync engine, written from Protocol/PROTOCOL.md
// ("Record writes", "List writes", "write", "Versions"), so the target can
// compare what `Engine.apply` did with what the protocol says it must do.
//
// The model walks paths and merges patches itself rather than calling
// `RecordPath+Operations.swift` or `Engine.mergePatch`; it shares only the
// value types (`JSONValue`, `JSONObject`, `RecordPath`) and the serializer,
// which FuzzJSON covers.
import TallyEngine
import TallyProtocol

typealias Bytes = [UInt8]

// MARK: Values at paths

/// The value at `segments` inside `value`; nil when absent (a missing key, an
/// index past the end, a segment that does not fit the container).
func modelGet(_ value: JSONValue?, _ segments: ArraySlice<RecordPath.Segment>) -> JSONValue? {
    guard let value else { return nil }
    guard let first = segments.first else { return value }
    switch (first, value) {
    case (.key(let key), .object(let object)): return modelGet(object[key], segments.dropFirst())
    case (.index(let index), .array(let array)):
        return index < array.count ? modelGet(array[index], segments.dropFirst()) : nil
    default: return nil
    }
}

func modelGet(_ data: JSONObject?, _ path: RecordPath) -> JSONValue? {
    data.flatMap { modelGet(.object($0), path.segments[...]) }
}

/// `set` at a path (PROTOCOL.md): creates missing parent objects, never
/// arrays; an index may be one past the end (append). nil when the path does
/// not fit (bad_path).
func modelSet(_ value: JSONValue?, _ segments: ArraySlice<RecordPath.Segment>, _ newValue: JSONValue) -> JSONValue? {
    guard let first = segments.first else { return newValue }
    switch first {
    case .key(let key):
        var object: JSONObject
        switch value {
        case nil: object = JSONObject()
        case .object(let existing)?: object = existing
        default: return nil
        }
        guard let child = modelSet(object[key], segments.dropFirst(), newValue) else { return nil }
        object[key] = child
        return .object(object)
    case .index(let index):
        guard case .array(var array)? = value else { return nil }
        if index < array.count {
            guard let child = modelSet(array[index], segments.dropFirst(), newValue) else { return nil }
            array[index] = child
        } else if index == array.count {
            guard let child = modelSet(nil, segments.dropFirst(), newValue) else { return nil }
            array.append(child)
        } else {
            return nil
        }
        return .array(array)
    }
}

/// `delete` at a path: the member or element goes, later elements move down.
/// Only called where a value exists.
func modelRemove(_ value: JSONValue, _ segments: ArraySlice<RecordPath.Segment>) -> JSONValue {
    guard let first = segments.first else { return value }
    let last = segments.count == 1
    switch (first, value) {
    case (.key(let key), .object(var object)):
        guard let child = object[key] else { return value }
        object[key] = last ? nil : modelRemove(child, segments.dropFirst())
        return .object(object)
    case (.index(let index), .array(var array)):
        guard index < array.count else { return value }
        if last { array.remove(at: index) } else { array[index] = modelRemove(array[index], segments.dropFirst()) }
        return .array(array)
    default:
        return value
    }
}

/// The smallest data whose value at `path` is `value` (nil: `{}`), for probing
/// PathReplay with a whole-record write that puts `value` there.
func modelBuild(_ path: RecordPath, _ value: JSONValue?) -> JSONObject {
    guard let value else { return [:] }
    var inner = value
    for segment in path.segments.reversed() {
        switch segment {
        case .key(let key): inner = .object([key: inner])
        case .index(let index): inner = .array(Array(repeating: .null, count: index) + [inner])
        }
    }
    return inner.objectValue ?? [:]
}

/// Segment by segment: `a` is a prefix of `b` (or equal).
func modelIsPrefix(_ a: RecordPath, _ b: RecordPath) -> Bool {
    guard a.segments.count <= b.segments.count else { return false }
    for (x, y) in zip(a.segments, b.segments) {
        switch (x, y) {
        case (.key(let p), .key(let q)): if !p.utf8.elementsEqual(q.utf8) { return false }
        case (.index(let p), .index(let q)): if p != q { return false }
        default: return false
        }
    }
    return true
}

func modelOverlaps(_ a: RecordPath, _ b: RecordPath) -> Bool { modelIsPrefix(a, b) || modelIsPrefix(b, a) }

/// RFC 7396 §2 MergePatch, as its pseudocode reads.
func modelMergePatch(_ target: JSONValue?, _ patch: JSONValue) -> JSONValue {
    guard case .object(let members) = patch else { return patch }
    var result: JSONObject
    if case .object(let existing)? = target { result = existing } else { result = JSONObject() }
    for (key, value) in members {
        if value.isNull {
            result[key] = nil
        } else {
            result[key] = modelMergePatch(result[key], value)
        }
    }
    return .object(result)
}

/// PROTOCOL.md "Names, paths, limits": 1–512 UTF-8 bytes, no control
/// characters (U+0000–U+001F, U+007F), no leading or trailing `/` (a prefix
/// may end with one, and may be empty), no `//`.
func modelValidName(_ bytes: Bytes, prefix: Bool = false) -> Bool {
    if bytes.isEmpty { return prefix }
    if bytes.count > 512 || bytes[0] == UInt8(ascii: "/") { return false }
    if !prefix, bytes[bytes.count - 1] == UInt8(ascii: "/") { return false }
    for (i, byte) in bytes.enumerated() {
        if byte < 0x20 || byte == 0x7F { return false }
        if byte == UInt8(ascii: "/"), i > 0, bytes[i - 1] == byte { return false }
    }
    return true
}

// MARK: State

struct ModelRecord: Equatable {
    var version: Int64
    var seq: Int64
    var created: Int64
    var updated: Int64
    var data: JSONObject
}

struct ModelList: Equatable {
    var version: Int64
    var seq: Int64
    var created: Int64
    var updated: Int64
    var entries: [Bytes]
}

/// What one accepted write must have done.
struct Effect {
    enum Push {
        case set(JSONObject)
        case setPath(RecordPath, JSONValue)
        case deletePath(RecordPath)
        case delete
        case addEntry(Bytes, index: Int)
        case removeEntry(Bytes, indexes: [Int])
        case setEntries([Bytes])
        case deleteList
    }
    var isList: Bool
    var beforeRecord: ModelRecord?
    var afterRecord: ModelRecord?
    var beforeList: ModelList?
    var afterList: ModelList?
    var push: Push
    /// `increment`'s reply value.
    var replyValue: JSONValue?
}

struct Model {
    var records: [Bytes: ModelRecord] = [:]
    var lists: [Bytes: ModelList] = [:]
    let limits: EngineLimits
    /// Names whose reads fail (EngineState throws storage_failed).
    let failingReads: Bool

    init(limits: EngineLimits, failingReads: Bool) {
        self.limits = limits
        self.failingReads = failingReads
    }

    static func readFails(_ name: Bytes, enabled: Bool) -> Bool {
        enabled && name.starts(with: Array("fail".utf8))
    }

    /// Applies one write to the model (the group's earlier writes already
    /// applied), or says why it must be refused.
    mutating func apply(_ write: Write, seq: Int64, now: Int64) -> Result<Effect, RefusalError> {
        let name = Bytes(write.name.utf8)
        if Self.readFails(name, enabled: failingReads) { return .failure(RefusalError(["storage_failed"])) }
        return write.isListWrite ? applyList(write, name: name, seq: seq, now: now)
            : applyRecord(write, name: name, seq: seq, now: now)
    }

    private mutating func applyRecord(_ write: Write, name: Bytes, seq: Int64, now: Int64) -> Result<Effect, RefusalError> {
        let current = records[name]
        var codes: Set<String> = []
        if let base = write.baseVersion, base != (current?.version ?? 0) { codes.insert("conflict") }
        let root = JSONValue.object(current?.data ?? JSONObject())
        var newData: JSONObject?
        var deleted = false
        let push: Effect.Push
        var replyValue: JSONValue?
        switch write.action {
        case .set(let data):
            newData = data
            push = .set(data)
        case .merge(let patch):
            if current == nil { codes.insert("not_found") } else { newData = modelMergePatch(root, .object(patch)).objectValue }
            push = .set(newData ?? [:])
        case .delete:
            if current == nil { codes.insert("not_found") }
            deleted = true
            push = .delete
        case .deletePath(let path):
            if current == nil || modelGet(root, path.segments[...]) == nil {
                codes.insert("not_found")
            } else {
                newData = modelRemove(root, path.segments[...]).objectValue
            }
            push = .deletePath(path)
        case .setPath(let path, let value):
            if let result = modelSet(root, path.segments[...], value) { newData = result.objectValue } else { codes.insert("bad_path") }
            push = .setPath(path, value)
        case .increment(let path, let by):
            var sum: JSONNumber?
            switch modelGet(root, path.segments[...]) {
            case nil: sum = by
            case .number(let old)?:
                if let a = old.int64Value, old.isInteger, let b = by.int64Value, by.isInteger,
                   case (let exact, false) = a.addingReportingOverflow(b) {
                    sum = JSONNumber(exact)
                } else if let double = JSONNumber(old.doubleValue + by.doubleValue) {
                    sum = double
                } else {
                    codes.insert("not_a_number")  // beyond Double's range
                }
            case .some:
                codes.insert("not_a_number")
            }
            if let sum {
                if let result = modelSet(root, path.segments[...], .number(sum)) {
                    newData = result.objectValue
                } else {
                    codes.insert("bad_path")
                }
            }
            replyValue = sum.map(JSONValue.number)
            push = .setPath(path, replyValue ?? .null)
        case .advance:
            // The engine alone knows no workflows: the hub's planner turns an
            // advance into plain writes before the engine sees one.
            codes.insert("bad_field")
            push = .delete
        case .boundedIncrement:
            fatalError("unreachable: only the hub's planner writes bounded increments")
        case .addEntry, .removeEntry, .setEntries, .deleteList:
            fatalError("unreachable: list write as record write")
        }
        if let newData, JSONValue.object(newData).serialized().count > limits.maxRecordBytes { codes.insert("too_large") }
        if let newData, modelDepth(.object(newData)) > limits.maxRecordDepth { codes.insert("too_large") }
        guard codes.isEmpty else { return .failure(RefusalError(codes)) }
        let after = deleted ? nil : ModelRecord(version: (current?.version ?? 0) + 1, seq: seq,
                                                created: current?.created ?? now, updated: now, data: newData!)
        records[name] = after
        return .success(Effect(isList: false, beforeRecord: current, afterRecord: after, push: push, replyValue: replyValue))
    }

    private mutating func applyList(_ write: Write, name: Bytes, seq: Int64, now: Int64) -> Result<Effect, RefusalError> {
        let current = lists[name]
        var codes: Set<String> = []
        if let base = write.baseVersion, base != (current?.version ?? 0) { codes.insert("conflict") }
        var entries = current?.entries ?? []
        var deleted = false
        let push: Effect.Push
        switch write.action {
        case .addEntry(let entryString, let at):
            let entry = Bytes(entryString.utf8)
            let index = at ?? entries.count
            if index > entries.count { codes.insert("bad_field") }
            if codes.isEmpty { entries.insert(entry, at: index) }
            push = .addEntry(entry, index: index)
        case .removeEntry(let entryString, let at):
            let entry = Bytes(entryString.utf8)
            var removed: [Int] = []
            if current == nil {
                codes.insert("not_found")
            } else if let at {
                if at < entries.count, entries[at] == entry { removed = [at] } else { codes.insert("not_found") }
            } else {
                removed = entries.indices.filter { entries[$0] == entry }
                if removed.isEmpty { codes.insert("not_found") }
            }
            for index in removed.reversed() { entries.remove(at: index) }
            push = .removeEntry(entry, indexes: removed)
        case .setEntries(let newEntries):
            if newEntries.count > limits.maxListEntries { codes.insert("too_large") }
            entries = newEntries.map { Bytes($0.utf8) }
            push = .setEntries(entries)
        case .deleteList:
            if current == nil { codes.insert("not_found") }
            deleted = true
            push = .deleteList
        case .set, .setPath, .merge, .delete, .deletePath, .increment, .advance, .boundedIncrement:
            fatalError("unreachable: record write as list write")
        }
        guard codes.isEmpty else { return .failure(RefusalError(codes)) }
        let after = deleted ? nil : ModelList(version: (current?.version ?? 0) + 1, seq: seq,
                                              created: current?.created ?? now, updated: now, entries: entries)
        lists[name] = after
        return .success(Effect(isList: true, beforeList: current, afterList: after, push: push))
    }
}

/// Why a write must be refused: every code that applies (the engine reports
/// one of them; PROTOCOL.md does not order them).
struct RefusalError: Error {
    var codes: Set<String>
    init(_ codes: Set<String>) { self.codes = codes }
}

/// Nesting depth as PROTOCOL.md counts it: the data object is level 1.
func modelDepth(_ value: JSONValue) -> Int {
    switch value {
    case .array(let values): return 1 + values.map(modelDepth).reduce(0, max)
    case .object(let object): return 1 + object.map { modelDepth($0.value) }.reduce(0, max)
    default: return 0
    }
}
