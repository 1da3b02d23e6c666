import CSQLite
import TallyProtocol

/// Everything a MemoryStore holds, the same tables as the SQLite schema.
/// Guarded by one lock; the writer changes it, readers read it.
struct MemoryTables {
    var records: [ByteName: StoredRecord] = [:]
    var recordNames = SortedNames()
    var lists: [ByteName: StoredList] = [:]
    var listNames = SortedNames()
    /// Each list's entries, ascending by key.
    var listEntries: [ByteName: [ListRow]] = [:]
    var changes = MemoryChangeLog()
    var idempotency: [ByteName: StoredIdempotency] = [:]
    var head: Int64 = 0
    var floor: Int64 = 0
    /// Record indexes: index id → value's JSON text → name → updated.
    var indexes: [String: [[UInt8]: [ByteName: Int64]]] = [:]
    var builtIndexes: Set<String> = []

    /// What to put back when a transaction fails.
    private enum Undo {
        case record(ByteName, StoredRecord?)
        case list(ByteName, StoredList?)
        case listEntries(ByteName, [ListRow]?)
        case listEntryInserted(ByteName, ListKey)
        case listEntriesRemoved(ByteName, [ListRow])
        case change(Int64)
        case idempotency(ByteName, StoredIdempotency?)
        case indexes([String: [[UInt8]: [ByteName: Int64]]], Set<String>)
    }

    /// Applies `units` all or nothing, like one SQLite transaction: on a
    /// failing unit everything of the batch is undone.
    mutating func apply(_ units: ArraySlice<StoreUnit>, hooks: StoreTestHooks) -> ApplyResult {
        var undo: [Undo] = []
        let (oldHead, oldFloor) = (head, floor)
        for index in units.indices {
            do throws(StoreError) {
                try apply(units[index], hooks: hooks, undo: &undo)
            } catch {
                for step in undo.reversed() { revert(step) }
                (head, floor) = (oldHead, oldFloor)
                return .failed(unitIndex: index, error)
            }
        }
        return .committed(lastSeq: head)
    }

    private mutating func apply(_ unit: StoreUnit, hooks: StoreTestHooks, undo: inout [Undo]) throws(StoreError) {
        for index in unit.mutations.indices {
            switch unit.mutations[index] {
            case .putRecord(let record):
                undo.append(.record(ByteName(record.name), setRecord(ByteName(record.name), record)))
            case .deleteRecord(let name):
                undo.append(.record(ByteName(name), setRecord(ByteName(name), nil)))
            case .putList(let list):
                undo.append(.list(ByteName(list.name), setList(ByteName(list.name), list)))
            case .deleteList(let name):
                undo.append(.list(ByteName(name), setList(ByteName(name), nil)))
                undo.append(.listEntries(ByteName(name), listEntries.removeValue(forKey: ByteName(name))))
            case .insertListEntry(let list, let row):
                // In place (no copy of the list): undo takes the key out again.
                let name = ByteName(list)
                let index = Self.index(in: listEntries[name] ?? [], notBelow: row.key)
                if index < listEntries[name]?.count ?? 0, listEntries[name]?[index].key == row.key {
                    throw StoreError(code: SQLITE_CONSTRAINT, message: "UNIQUE constraint failed: list_entries.list, list_entries.pos",
                                     operation: "insert list entry")
                }
                listEntries[name, default: []].insert(row, at: index)
                undo.append(.listEntryInserted(name, row.key))
            case .deleteListEntries(let list, let keys):
                let name = ByteName(list)
                var removed: [ListRow] = []
                for key in keys {
                    let index = Self.index(in: listEntries[name] ?? [], notBelow: key)
                    if index < listEntries[name]?.count ?? 0, listEntries[name]?[index].key == key {
                        removed.append(listEntries[name]!.remove(at: index))
                    }
                }
                undo.append(.listEntriesRemoved(name, removed))
            case .clearListEntries(let list):
                undo.append(.listEntries(ByteName(list), listEntries.removeValue(forKey: ByteName(list))))
            case .putIndexEntry, .deleteIndexEntry, .markIndexBuilt, .dropIndex:
                // A copy per mutation: the memory store serves tests and
                // `--data :memory:`, where simplicity wins.
                undo.append(.indexes(indexes, builtIndexes))
                applyIndex(unit.mutations[index])
            }
            if let error = hooks.afterMutation?(unit.token, index) { throw error }
        }
        for change in unit.changes {
            try changes.insert(change)
            undo.append(.change(change.seq))
            head = max(head, change.seq)
        }
        if let entry = unit.idempotency {
            let key = ByteName(entry.key)
            undo.append(.idempotency(key, idempotency.updateValue(entry, forKey: key)))
        }
    }

    private mutating func revert(_ step: Undo) {
        switch step {
        case .record(let name, let old): _ = setRecord(name, old)
        case .list(let name, let old): _ = setList(name, old)
        case .listEntries(let name, let old): listEntries[name] = old
        case .listEntryInserted(let name, let key):
            let index = Self.index(in: listEntries[name] ?? [], notBelow: key)
            listEntries[name]?.remove(at: index)
        case .listEntriesRemoved(let name, let rows):
            for row in rows {
                listEntries[name, default: []].insert(row, at: Self.index(in: listEntries[name] ?? [], notBelow: row.key))
            }
        case .change(let seq): changes.remove(seq: seq)
        case .idempotency(let key, let old): idempotency[key] = old
        case .indexes(let old, let built): (indexes, builtIndexes) = (old, built)
        }
    }

    private mutating func applyIndex(_ mutation: StoreMutation) {
        switch mutation {
        case .putIndexEntry(let entry): indexes[entry.index, default: [:]][entry.value, default: [:]][ByteName(entry.name)] = entry.updated
        case .deleteIndexEntry(let index, let value, let name): indexes[index]?[value]?[ByteName(name)] = nil
        case .markIndexBuilt(let index): builtIndexes.insert(index)
        case .dropIndex(let index):
            indexes[index] = nil
            builtIndexes.remove(index)
        case .putRecord, .deleteRecord, .putList, .deleteList, .insertListEntry, .deleteListEntries, .clearListEntries: break
        }
    }

    /// Sets or removes a record, keeping the sorted names in step; returns
    /// the previous value.
    private mutating func setRecord(_ name: ByteName, _ record: StoredRecord?) -> StoredRecord? {
        let old: StoredRecord?
        if let record {
            old = records.updateValue(record, forKey: name)
            if old == nil { recordNames.insert(name) }
        } else {
            old = records.removeValue(forKey: name)
            if old != nil { recordNames.remove(name) }
        }
        return old
    }

    private mutating func setList(_ name: ByteName, _ list: StoredList?) -> StoredList? {
        let old: StoredList?
        if let list {
            old = lists.updateValue(list, forKey: name)
            if old == nil { listNames.insert(name) }
        } else {
            old = lists.removeValue(forKey: name)
            if old != nil { listNames.remove(name) }
        }
        return old
    }

    static func index(in rows: [ListRow], notBelow key: ListKey) -> Int {
        ListKey.firstIndex(in: rows, notBelow: key, by: \.key)
    }
}
