import TallyProtocol

/// What changed between two states of an observed set of records, in the
/// style of Realm's fine-grained notifications (seed 002): which names
/// appeared, which went away, and for each that stayed, which of its
/// top-level members changed.
public struct ChangeSet: Sendable, Equatable {
    public var inserted: [String]
    public var deleted: [String]
    /// Name → the top-level keys whose values changed (added, removed or different).
    public var modified: [String: Set<String>]

    public init(inserted: [String] = [], deleted: [String] = [], modified: [String: Set<String>] = [:]) {
        self.inserted = inserted
        self.deleted = deleted
        self.modified = modified
    }

    public var isEmpty: Bool { inserted.isEmpty && deleted.isEmpty && modified.isEmpty }
}

/// One notification of an observation: what changed, and the current values.
public struct ObservationUpdate: Sendable {
    /// The first notification (every record is in `inserted`) or one after
    /// a resnapshot.
    public var isInitial: Bool
    public var changes: ChangeSet
    /// Every observed record as it is now, by name.
    public var records: [String: RecordEnvelope]
    /// The observation is current up to this seq.
    public var seq: Int64
}

/// The records an observation holds, and the change set of each update.
/// A pure value: the client feeds it snapshots and changes.
public struct ObservedRecords: Sendable {
    public private(set) var records: [String: RecordEnvelope] = [:]

    public init() {}

    /// Replaces everything with a snapshot.
    public mutating func reset(to snapshot: [RecordEnvelope]) -> ChangeSet {
        let before = records
        records = [:]
        for record in snapshot { records[record.name] = record }
        return Self.diff(before: before, after: records, names: Set(before.keys).union(records.keys))
    }

    /// Applies changes in seq order; a change this state already reflects
    /// (its seq is not above the record's) is skipped, so a redelivery
    /// after a reconnect changes nothing.
    public mutating func apply(_ changes: [Change]) -> ChangeSet {
        var before: [String: RecordEnvelope?] = [:]
        for change in changes where !change.isList {
            let name = change.name
            let current = records[name]
            if let current, current.seq >= change.seq { continue }
            if before[name] == nil { before[name] = .some(current) }
            let data: JSONObject?
            do { data = try change.applied(to: current?.data) } catch { continue }
            if let data {
                records[name] = RecordEnvelope(name: name, version: change.version, seq: change.seq,
                                               created: current?.created ?? change.time, updated: change.time, data: data)
            } else {
                records[name] = nil
            }
        }
        var old: [String: RecordEnvelope] = [:]
        for (name, record) in before { if let record { old[name] = record } }
        return Self.diff(before: old, after: records, names: Set(before.keys))
    }

    /// Applies what a change did to a live query's result: records in it
    /// now are put in (unless this state holds a newer copy), names that
    /// left are dropped.
    public mutating func apply(_ change: QueryChange) -> ChangeSet {
        var before: [String: RecordEnvelope] = [:]
        var names = Set<String>()
        for record in change.entered + change.changed {
            if let current = records[record.name], current.seq > record.seq { continue }
            names.insert(record.name)
            if let current = records[record.name], before[record.name] == nil { before[record.name] = current }
            records[record.name] = record
        }
        for name in change.left {
            names.insert(name)
            if let current = records.removeValue(forKey: name), before[name] == nil { before[name] = current }
        }
        return Self.diff(before: before, after: records, names: names)
    }

    static func diff(before: [String: RecordEnvelope], after: [String: RecordEnvelope], names: Set<String>) -> ChangeSet {
        var set = ChangeSet()
        for name in names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            switch (before[name], after[name]) {
            case (nil, _?): set.inserted.append(name)
            case (_?, nil): set.deleted.append(name)
            case (let old?, let new?):
                let keys = changedKeys(old.data, new.data)
                if !keys.isEmpty { set.modified[name] = keys }
            case (nil, nil): break
            }
        }
        return set
    }

    /// Top-level members added, removed or changed.
    public static func changedKeys(_ old: JSONObject, _ new: JSONObject) -> Set<String> {
        var keys = Set<String>()
        for key in Set(old.keys).union(new.keys) where old[key] != new[key] { keys.insert(key) }
        return keys
    }
}

extension TallyClient {
    /// Observes every record under `prefix`: `handler` gets the initial
    /// state (all inserted), then one update per batch of changes with the
    /// names inserted, deleted and modified (with the keys that changed).
    /// Survives reconnects: it resumes, and a resnapshot is diffed against
    /// what it held, so the handler sees exactly what changed meanwhile.
    public func observe(prefix: String, handler: @escaping @Sendable (ObservationUpdate) -> Void) -> Subscription {
        observe(.prefix(prefix), handler: handler)
    }

    /// Observes a live query's result (PROTOCOL.md, "Live queries"), e.g.
    /// the open orders: `inserted` are the records that entered it,
    /// `deleted` those that left, `modified` those that changed inside it
    /// (with the keys that changed). A reconnect resumes by the hub's delta
    /// (or a fresh result, diffed against what was held).
    public func observe(query: Query, handler: @escaping @Sendable (ObservationUpdate) -> Void) -> Subscription {
        observe(.query(query), handler: handler)
    }

    /// Observes one record (it need not exist yet).
    public func observe(record name: String, handler: @escaping @Sendable (ObservationUpdate) -> Void) -> Subscription {
        observe(.record(name), handler: handler)
    }

    private func observe(_ target: SubscriptionTarget, handler: @escaping @Sendable (ObservationUpdate) -> Void) -> Subscription {
        let state = ObservationBox()
        return subscribe(target) { event in
            switch event {
            case .snapshot(let snapshot):
                let changes = state.value.reset(to: snapshot.records)
                let initial = !state.started
                state.started = true
                if initial || !changes.isEmpty {
                    handler(ObservationUpdate(isInitial: initial, changes: changes, records: state.value.records,
                                              seq: snapshot.seq))
                }
            case .changes(let changes, let through):
                let set = state.value.apply(changes)
                if !set.isEmpty {
                    handler(ObservationUpdate(isInitial: false, changes: set, records: state.value.records, seq: through))
                }
            case .queryChange(let change):
                let set = state.value.apply(change)
                if !set.isEmpty {
                    handler(ObservationUpdate(isInitial: false, changes: set, records: state.value.records, seq: change.seq))
                }
            case .event, .failed:
                break
            }
        }
    }
}

/// An observation's state, touched only on the client's queue (where every
/// subscription handler runs).
private final class ObservationBox: @unchecked Sendable {
    var value = ObservedRecords()
    var started = false
}
