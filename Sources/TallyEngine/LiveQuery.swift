import TallyProtocol

/// A record index the hub keeps in the store: for each record under
/// `prefix`, the JSON text of its value at `path`. Live queries read it so
/// that their snapshots cost what the result holds. The hub indexes each
/// workflow's stage field and `owner` by itself; a configuration adds more.
public struct RecordIndex: Sendable, Hashable {
    public var prefix: String
    public var path: RecordPath
    /// Stored with each row: prefix and path, split by U+001F (a control
    /// character no name may hold).
    public var id: String { "\(prefix)\u{1F}\(path)" }

    public init(prefix: String, path: RecordPath) {
        self.prefix = prefix
        self.path = path
    }

    /// Each workflow's stage field and owner, and whether an offline
    /// mirror's conflict is resolved (the board's panel asks for the open ones).
    public static func defaults(for workflows: [Workflow]) -> [RecordIndex] {
        var indexes: [RecordIndex] = []
        if let resolved = try? RecordPath(parsing: "resolved") { indexes.append(RecordIndex(prefix: "conflicts/", path: resolved)) }
        for workflow in workflows {
            for field in [workflow.stageField, "owner"] {
                guard let path = try? RecordPath(parsing: field) else { continue }
                let index = RecordIndex(prefix: workflow.prefix, path: path)
                if !indexes.contains(index) { indexes.append(index) }
            }
        }
        return indexes
    }

    public func covers(_ name: String) -> Bool { name.hasBytePrefix(prefix) }

    /// The indexed value of a record (its JSON text), nil when it has none there.
    public func value(of record: RecordState) -> [UInt8]? {
        JSONValue.object(record.data).value(at: path)?.serialized()
    }

    /// Whether this index can answer `query`: it covers the query's prefix
    /// and the query has a condition on its path (or asks for the caller's
    /// own records and this is the owner index).
    public func values(for query: Query) -> [[UInt8]]? {
        guard query.prefix.hasBytePrefix(prefix) else { return nil }
        if let condition = query.conditions.first(where: { $0.path == path }) { return condition.values }
        if query.own, let owner = query.owner, path.description == "owner" { return [JSONValue.string(owner).serialized()] }
        return nil
    }
}

/// The members of a limited live query's result (the first `limit` records
/// by update time), kept by the hub between changes so that most changes are
/// decided without reading the store.
///
/// Invariant: fewer than `limit` members means every matching record is a
/// member; so only a member leaving a full result needs a fresh read.
public struct LimitedResult: Sendable, Equatable {
    public struct Member: Sendable, Equatable {
        public var name: String
        public var updated: Int64
    }

    public let limit: Int
    public let newestFirst: Bool
    /// In result order.
    public private(set) var members: [Member]

    public init(limit: Int, newestFirst: Bool, records: [RecordState]) {
        self.limit = limit
        self.newestFirst = newestFirst
        members = []
        members = Self.ordered(records.map { Member(name: $0.name, updated: $0.updated) }, newestFirst: newestFirst)
        if members.count > limit { members.removeLast(members.count - limit) }
    }

    /// What a change to one record does.
    public enum Outcome: Equatable {
        case none
        /// The record is (still) a member; `evicted` left to make room.
        case entered(evicted: String?)
        case changed
        case left
        /// Cannot be decided from the members alone: read the result again.
        case reread
    }

    public var isFull: Bool { members.count >= limit }

    /// Applies a change to record `name`: `updated` is its update time when
    /// it now matches the query, nil when it does not (or was deleted).
    public mutating func apply(name: String, updated: Int64?) -> Outcome {
        let index = members.firstIndex { $0.name.sameBytes(as: name) }
        guard let updated else {
            guard let index else { return .none }
            let wasFull = isFull
            members.remove(at: index)
            return wasFull ? .reread : .left
        }
        let member = Member(name: name, updated: updated)
        if let index {
            let wasFull = isFull
            members.remove(at: index)
            let position = insertionPoint(of: member)
            members.insert(member, at: position)
            // Moved to the far end of a full result: a record outside may
            // now come before it.
            return wasFull && position == members.count - 1 ? .reread : .changed
        }
        if !isFull {
            members.insert(member, at: insertionPoint(of: member))
            return .entered(evicted: nil)
        }
        let position = insertionPoint(of: member)
        guard position < members.count else { return .none }
        members.insert(member, at: position)
        return .entered(evicted: members.removeLast().name)
    }

    /// Replaces the members with a fresh read; returns the names that left.
    public mutating func replace(with records: [RecordState]) -> [String] {
        let fresh = LimitedResult(limit: limit, newestFirst: newestFirst, records: records)
        let kept = Set(fresh.members.map { ByteKey($0.name) })
        let left = members.filter { !kept.contains(ByteKey($0.name)) }.map(\.name)
        members = fresh.members
        return left
    }

    public func contains(_ name: String) -> Bool { members.contains { $0.name.sameBytes(as: name) } }

    /// Result order: by update time, ties by name, both reversed for newest first.
    public static func precedes(_ a: Member, _ b: Member, newestFirst: Bool) -> Bool {
        if a.updated != b.updated { return newestFirst ? a.updated > b.updated : a.updated < b.updated }
        let byName = a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
        return newestFirst ? (!byName && !a.name.sameBytes(as: b.name)) : byName
    }

    static func ordered(_ members: [Member], newestFirst: Bool) -> [Member] {
        members.sorted { precedes($0, $1, newestFirst: newestFirst) }
    }

    private func insertionPoint(of member: Member) -> Int {
        var low = 0, high = members.count
        while low < high {
            let mid = (low + high) / 2
            if Self.precedes(members[mid], member, newestFirst: newestFirst) { low = mid + 1 } else { high = mid }
        }
        return low
    }
}
