import TallyProtocol

/// A list's rows read in order from one end, one at a time (a prepared
/// statement stepping through an index, or an array).
public protocol ListCursor: AnyObject {
    func next() throws(ProtocolError) -> ListRow?
}

/// What one list change does to the rows.
public enum ListEdit: Sendable, Equatable {
    case insert(ListRow)
    case remove([ListKey])
    /// `setEntries`: every row goes, these come.
    case replace([ListRow])
    /// The list was deleted: every row goes.
    case delete
}

/// Edits not (yet) in a base list: each key's latest state, and whether the
/// base's rows were all dropped (`setEntries`, `delete`).
///
/// Laid over the base by key, so it may be laid over a base that already
/// holds some of these edits and still read the same: a key the edits name
/// reads as the edits say whatever the base holds. That is what lets the
/// hub's cache keep the edits of uncommitted changes over the store's rows
/// even while the store commits them behind its back (the cache drops an
/// edit only once the core has seen its commit).
public struct ListEdits: Sendable {
    /// The seq of the `setEntries`/`delete` that dropped the base's rows.
    public private(set) var clearedAt: Int64?
    /// Each edited key's entry (nil: removed) and the seq that edited it.
    private var latest: [ListKey: (entry: String?, seq: Int64)] = [:]
    /// `latest`'s keys, ascending.
    private var keys: [ListKey] = []

    public init() {}

    public var isEmpty: Bool { clearedAt == nil && latest.isEmpty }
    public var count: Int { latest.count }

    /// Applies one change's edit, made at `seq`.
    public mutating func apply(_ edit: ListEdit, seq: Int64) {
        switch edit {
        case .insert(let row):
            set(row.key, row.entry, seq: seq)
        case .remove(let removed):
            for key in removed { set(key, nil, seq: seq) }
        case .replace(let rows):
            clear(seq: seq)
            for row in rows { set(row.key, row.entry, seq: seq) }
        case .delete:
            clear(seq: seq)
        }
    }

    private mutating func clear(seq: Int64) {
        clearedAt = seq
        latest.removeAll()
        keys.removeAll()
    }

    private mutating func set(_ key: ListKey, _ entry: String?, seq: Int64) {
        if latest.updateValue((entry, seq), forKey: key) == nil {
            keys.insert(key, at: Self.firstIndex(in: keys, notBelow: key))
        }
    }

    /// Forgets what the base now holds: every edit made at or before `seq`.
    public mutating func prune(through seq: Int64) {
        if let cleared = clearedAt, cleared <= seq { clearedAt = nil }
        guard latest.values.contains(where: { $0.seq <= seq }) else { return }
        latest = latest.filter { $0.value.seq > seq }
        keys.removeAll { latest[$0] == nil }
    }

    /// The rows of `base` with these edits laid over them: O(log m) to
    /// start (m edits), the edited rows read in place as the cursor steps.
    public func cursor(over base: any ListCursor, descending: Bool, after: ListKey?) -> any ListCursor {
        let start: Int
        if descending {
            start = (after.map { Self.firstIndex(in: keys, notBelow: $0) } ?? keys.count) - 1
        } else if let after {
            let index = Self.firstIndex(in: keys, notBelow: after)
            start = index < keys.count && keys[index] == after ? index + 1 : index
        } else {
            start = 0
        }
        return EditedListCursor(base: clearedAt == nil ? base : nil, edited: self, start: start, descending: descending)
    }

    /// The edited row at `index` of the sorted keys, nil when it was removed.
    func row(at index: Int) -> ListRow? {
        let key = keys[index]
        return latest[key]?.entry.map { ListRow(key: key, entry: $0) }
    }

    var keyCount: Int { keys.count }

    /// The keys holding `entry`: `baseKeys` (those of the base) that no edit
    /// names, and the edited keys that hold it now; ascending.
    public func keys(holding entry: String, baseKeys: [ListKey]) -> [ListKey] {
        var found = clearedAt == nil ? baseKeys.filter { latest[$0] == nil } : []
        for key in keys where latest[key]?.entry?.sameBytes(as: entry) == true { found.append(key) }
        return found.sorted()
    }

    func names(_ key: ListKey) -> Bool { latest[key] != nil }

    /// `EngineState.listRank` of the rows with these edits over a base that
    /// answers it for the keys given (`base`): the base's count, less the
    /// edited keys below `key` that it holds, plus those that hold an
    /// entry now. One reading of the base, so a base that commits some of
    /// these edits between two calls still gives the same answer.
    public func rank(below key: ListKey, holding asked: [ListKey],
                     base: ([ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]))
        throws(ProtocolError) -> (below: Int, held: [Bool]) {
        let editedBelow = keys[..<Self.firstIndex(in: keys, notBelow: key)]
        let nowBelow = editedBelow.reduce(0) { $0 + (latest[$1]?.entry == nil ? 0 : 1) }
        var held = asked.map { latest[$0].map { $0.entry != nil } }
        guard clearedAt == nil else { return (nowBelow, held.map { $0 ?? false }) }
        let unnamed = asked.filter { latest[$0] == nil }
        let answer = try base(Array(editedBelow) + unnamed)
        let wereBelow = answer.held[..<editedBelow.count].reduce(0) { $0 + ($1 ? 1 : 0) }
        var fromBase = answer.held[editedBelow.count...].makeIterator()
        for index in held.indices where held[index] == nil { held[index] = fromBase.next() ?? false }
        return (answer.below - wereBelow + nowBelow, held.map { $0 ?? false })
    }

    /// `EngineState.listRow` of the rows with these edits over a base:
    /// starts from the base's row some way before `index` (the edits move
    /// an entry by at most their number of keys), ranks it in the edited
    /// rows (`rank`), and steps forward through them (`rows`). O(rank + m)
    /// for m edited keys, instead of O(index).
    public func row(at index: Int, baseRow: (Int) throws(ProtocolError) -> ListRow?,
                    rank: (ListKey) throws(ProtocolError) -> (below: Int, held: Bool),
                    rows: (ListKey?) throws(ProtocolError) -> any ListCursor) throws(ProtocolError) -> ListRow? {
        guard index >= 0 else { return nil }
        var start: ListKey?
        var passed = 0
        // The edited rows differ from any one reading of the base by at
        // most one row per edited key, so the base's row at `back` is at
        // most `index` in them.
        let back = index - keys.count - 1
        if clearedAt == nil, back >= 0 {
            // No base row there: the base has at most `back` rows, and
            // the edits add at most `keys.count`, fewer than `index`.
            guard let row = try baseRow(back) else { return nil }
            let ranked = try rank(row.key)
            passed = ranked.below + (ranked.held ? 1 : 0)
            start = row.key
            if passed > index { (start, passed) = (nil, 0) }
        }
        let cursor = try rows(start)
        while let row = try cursor.next() {
            if passed == index { return row }
            passed += 1
        }
        return nil
    }

    static func firstIndex(in keys: [ListKey], notBelow key: ListKey) -> Int {
        ListKey.firstIndex(in: keys, notBelow: key) { $0 }
    }
}

/// A base cursor merged with the edited rows: base rows the edits name are
/// skipped, edited rows that hold an entry come in their place.
final class EditedListCursor: ListCursor {
    private let base: (any ListCursor)?
    private let edited: ListEdits
    private let descending: Bool
    /// The next edited key to look at.
    private var index: Int
    private var pending: ListRow?
    private var baseDone = false
    private var own: ListRow?

    init(base: (any ListCursor)?, edited: ListEdits, start: Int, descending: Bool) {
        self.base = base
        self.edited = edited
        self.descending = descending
        index = start
        baseDone = base == nil
    }

    /// The next edited row that holds an entry, in the cursor's direction.
    private func nextOwn() -> ListRow? {
        while index >= 0, index < edited.keyCount {
            defer { index += descending ? -1 : 1 }
            if let row = edited.row(at: index) { return row }
        }
        return nil
    }

    func next() throws(ProtocolError) -> ListRow? {
        if pending == nil, !baseDone, let base {
            while let row = try base.next() {
                if !edited.names(row.key) { pending = row; break }
            }
            if pending == nil { baseDone = true }
        }
        if own == nil { own = nextOwn() }
        guard let candidate = pending else {
            defer { own = nil }
            return own
        }
        if let row = own, descending ? candidate.key < row.key : row.key < candidate.key {
            own = nil
            return row
        }
        pending = nil
        return candidate
    }
}

/// A list's rows in a sorted array: the engine's overlay for an empty base,
/// and the in-memory state of tests.
public struct SortedListRows: Sendable, Equatable {
    public private(set) var rows: [ListRow] = []

    public init(rows: [ListRow] = []) { self.rows = rows }

    public var entries: [String] { rows.map(\.entry) }

    public mutating func apply(_ edit: ListEdit) {
        switch edit {
        case .insert(let row):
            rows.insert(row, at: index(notBelow: row.key))
        case .remove(let keys):
            let gone = Set(keys)
            rows.removeAll { gone.contains($0.key) }
        case .replace(let new):
            rows = new
        case .delete:
            rows = []
        }
    }

    public func cursor(descending: Bool, after: ListKey?) -> any ListCursor {
        var slice: [ListRow]
        if let after {
            let start = index(notBelow: after)
            let past = start < rows.count && rows[start].key == after ? start + 1 : start
            slice = descending ? Array(rows[..<start]) : Array(rows[past...])
        } else {
            slice = rows
        }
        if descending { slice.reverse() }
        return ArrayListCursor(slice)
    }

    public func keys(holding entry: String) -> [ListKey] {
        rows.filter { $0.entry.sameBytes(as: entry) }.map(\.key)
    }

    private func index(notBelow key: ListKey) -> Int {
        ListKey.firstIndex(in: rows, notBelow: key, by: \.key)
    }
}

/// Rows from an array, in the array's order.
public final class ArrayListCursor: ListCursor {
    private let rows: [ListRow]
    private var index = 0

    public init(_ rows: [ListRow]) { self.rows = rows }

    public func next() throws(ProtocolError) -> ListRow? {
        guard index < rows.count else { return nil }
        index += 1
        return rows[index - 1]
    }
}
