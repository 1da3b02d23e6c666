import TallyProtocol

/// One write to one record or list.
public enum StoreMutation: Sendable, Equatable {
    /// Inserts the record or replaces the one with the same name.
    case putRecord(StoredRecord)
    /// Removes the record; nothing happens when there is none.
    case deleteRecord(String)
    /// Inserts the list's row or replaces the one with the same name (its
    /// entries are separate mutations).
    case putList(StoredList)
    /// Removes the list and its entries; nothing happens when there is none.
    case deleteList(String)
    /// Inserts an index row or replaces the one with the same index, value
    /// and name.
    case putIndexEntry(StoredIndexEntry)
    /// Removes an index row; nothing happens when there is none.
    case deleteIndexEntry(index: String, value: [UInt8], name: String)
    /// Records that index `id` holds every record it covers (after a build).
    case markIndexBuilt(String)
    /// Removes index `id`'s rows and its built mark (an index no longer configured).
    case dropIndex(String)
    /// Inserts one entry of a list; a key the list already has fails the unit.
    case insertListEntry(list: String, ListRow)
    /// Removes the entries with these keys from a list.
    case deleteListEntries(list: String, [ListKey])
    /// Removes every entry of a list (before `setEntries` inserts the new ones).
    case clearListEntries(String)
}

/// One atomic unit (one client command, possibly touching several records):
/// never split across transactions. Either everything in it is applied or
/// nothing is.
public struct StoreUnit: Sendable, Equatable {
    public var mutations: [StoreMutation]
    /// Appended to the change log; a seq that is already there fails the unit.
    public var changes: [StoredChange]
    /// Remembered (inserted or replaced) with the unit, when given.
    public var idempotency: StoredIdempotency?
    /// Opaque to the store, handed back in the commit outcome.
    public var token: UInt64

    public init(mutations: [StoreMutation] = [], changes: [StoredChange] = [],
                idempotency: StoredIdempotency? = nil, token: UInt64) {
        self.mutations = mutations
        self.changes = changes
        self.idempotency = idempotency
        self.token = token
    }
}
