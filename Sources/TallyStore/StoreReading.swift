import TallyProtocol

/// Reads from a store. One owner thread per reader (not Sendable): make one
/// reader per thread that reads. Each call sees the latest committed state.
public protocol StoreReading: AnyObject {
    func record(_ name: String) throws(StoreError) -> StoredRecord?
    func list(_ name: String) throws(StoreError) -> StoredList?
    /// The entries of list `name` in key order (`descending`: from the
    /// last), after `after` in that direction when given: O(log n) to the
    /// first, O(1) per next.
    func listEntries(_ name: String, descending: Bool, after: ListKey?) throws(StoreError) -> any StoredListCursor
    /// The keys of list `name`'s entries equal to `entry`, ascending (an
    /// index on (list, entry): O(log n + found)).
    func listKeys(_ name: String, holding entry: String) throws(StoreError) -> [ListKey]
    /// How many entries of list `name` have a key below `key`, and which of
    /// `keys` it holds, read at one point in time: O(n / 1,024 + 2,048 +
    /// k log n) through counted blocks (SQLiteListBlocks.swift).
    func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(StoreError) -> (below: Int, held: [Bool])
    /// The entry at `index` of list `name` in key order, nil past the end:
    /// O(n / 1,024 + log n).
    func listEntry(_ name: String, at index: Int) throws(StoreError) -> ListRow?
    /// Records whose name starts with `prefix` ("" = all), ordered by name
    /// bytewise (UTF-8), names > `after` when given, at most `limit`.
    func records(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredRecord]
    /// Lists, like `records(prefix:after:limit:)`.
    func lists(prefix: String, after: String?, limit: Int) throws(StoreError) -> [StoredList]
    /// Changes with seq > `after`, ascending, at most `limit`.
    func changes(after: Int64, limit: Int) throws(StoreError) -> [StoredChange]
    /// Changes of one entity with seq > `after`, ascending, at most `limit`.
    func changes(after: Int64, kind: EntityKind, name: String, limit: Int) throws(StoreError) -> [StoredChange]
    /// Record changes whose name starts with `prefix`, seq > `after`,
    /// ascending, at most `limit`.
    func changes(after: Int64, prefix: String, limit: Int) throws(StoreError) -> [StoredChange]
    func idempotency(_ key: String) throws(StoreError) -> StoredIdempotency?
    /// The ids of the record indexes that have been built (`markIndexBuilt`).
    func builtIndexes() throws(StoreError) -> [String]
    /// Names of records with `value` in `index`, under `prefix`, ordered by
    /// name bytewise, names > `after` when given, at most `limit`.
    func indexedNames(index: String, value: [UInt8], prefix: String, after: String?,
                      limit: Int) throws(StoreError) -> [String]
    /// Names of records with `value` in `index`, under `prefix`, by update
    /// time (newest first when `newestFirst`; ties by name), at most `limit`.
    func indexedNamesByUpdate(index: String, value: [UInt8], prefix: String, newestFirst: Bool,
                              limit: Int) throws(StoreError) -> [String]
    /// Head and floor are O(1); the record and list counts are O(n) in
    /// SQLiteStore: call it rarely.
    func state() throws(StoreError) -> StoreState
    /// The committed head seq and the log's floor, O(1): what every resume
    /// and `hello` needs.
    func sequenceBounds() throws(StoreError) -> (head: Int64, floor: Int64)
}
