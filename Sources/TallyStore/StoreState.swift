/// A summary of what the store holds, for startup, resume checks and metrics.
public struct StoreState: Sendable, Equatable {
    /// The highest committed change seq, 0 when none. Kept in the store's
    /// meta data, so it stays right when retention has pruned every change.
    public var headSeq: Int64
    /// Every change with seq > floorSeq is retained: resuming from N (the
    /// last seq a client saw) is possible iff N >= floorSeq.
    public var floorSeq: Int64
    /// O(n) in SQLiteStore (`SELECT count(*)`): call it rarely.
    public var recordCount: Int
    /// O(n) in SQLiteStore (`SELECT count(*)`): call it rarely.
    public var listCount: Int
    /// Rows in the change log (kept in meta data, O(1)).
    public var changeCount: Int
    /// Bytes of the pushes in the change log (kept in meta data, O(1)).
    public var changeBytes: Int

    public init(headSeq: Int64, floorSeq: Int64, recordCount: Int, listCount: Int, changeCount: Int,
                changeBytes: Int = 0) {
        self.headSeq = headSeq
        self.floorSeq = floorSeq
        self.recordCount = recordCount
        self.listCount = listCount
        self.changeCount = changeCount
        self.changeBytes = changeBytes
    }
}
