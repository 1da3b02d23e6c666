/// One row of a record index: under index `index`, record `name` has
/// `value` (the JSON text of its value at the index's path) and was last
/// updated at `updated`. The hub computes them; the store parses no JSON.
///
/// Live queries read an index by value in name order (a page of the result)
/// or by update time (the newest or oldest few), so a query costs what its
/// result holds, not what the prefix holds.
public struct StoredIndexEntry: Sendable, Equatable {
    /// The index's id (`IndexDefinition.id` in the hub): prefix and path.
    public var index: String
    public var value: [UInt8]
    public var name: String
    /// Milliseconds since the Unix epoch: the record's `updated`.
    public var updated: Int64

    public init(index: String, value: [UInt8], name: String, updated: Int64) {
        self.index = index
        self.value = value
        self.name = name
        self.updated = updated
    }
}
