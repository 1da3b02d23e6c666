import TallyProtocol

/// One entry of a list with its order key.
public struct ListRow: Sendable, Equatable {
    public var key: ListKey
    public var entry: String

    public init(key: ListKey, entry: String) {
        self.key = key
        self.entry = entry
    }
}

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

    /// The rows of `base` with these edits laid over them.
    public func cursor(over base: any ListCursor, descending: Bool, after: ListKey?) -> any ListCursor {
        var rows: [ListRow] = []
        for key in keys {
            guard let entry = latest[key]?.entry else { continue }
            if let after, descending ? !(key < after) : !(after < key) { continue }
            rows.append(ListRow(key: key, entry: entry))
        }
        if descending { rows.reverse() }
        return EditedListCursor(base: clearedAt == nil ? base : nil, edited: self, rows: rows, descending: descending)
    }

    /// The keys holding `entry`: `baseKeys` (those of the base) that no edit
    /// names, and the edited keys that hold it now; ascending.
    public func keys(holding entry: String, baseKeys: [ListKey]) -> [ListKey] {
        var found = clearedAt == nil ? baseKeys.filter { latest[$0] == nil } : []
        for key in keys where latest[key]?.entry?.sameBytes(as: entry) == true { found.append(key) }
        return found.sorted()
    }

    func names(_ key: ListKey) -> Bool { latest[key] != nil }

    static func firstIndex(in keys: [ListKey], notBelow key: ListKey) -> Int {
        var low = 0, high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle] < key { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

/// A base cursor merged with the edited rows: base rows the edits name are
/// skipped, edited rows that hold an entry come in their place.
final class EditedListCursor: ListCursor {
    private let base: (any ListCursor)?
    private let edited: ListEdits
    private let rows: [ListRow]
    private let descending: Bool
    private var index = 0
    private var pending: ListRow?
    private var baseDone = false

    init(base: (any ListCursor)?, edited: ListEdits, rows: [ListRow], descending: Bool) {
        self.base = base
        self.edited = edited
        self.rows = rows
        self.descending = descending
        baseDone = base == nil
    }

    func next() throws(ProtocolError) -> ListRow? {
        if pending == nil, !baseDone, let base {
            while let row = try base.next() {
                if !edited.names(row.key) { pending = row; break }
            }
            if pending == nil { baseDone = true }
        }
        let own = index < rows.count ? rows[index] : nil
        guard let candidate = pending else {
            index += own == nil ? 0 : 1
            return own
        }
        if let own, descending ? candidate.key < own.key : own.key < candidate.key {
            index += 1
            return own
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
        var low = 0, high = rows.count
        while low < high {
            let middle = (low + high) / 2
            if rows[middle].key < key { low = middle + 1 } else { high = middle }
        }
        return low
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
