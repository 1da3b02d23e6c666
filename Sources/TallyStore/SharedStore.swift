/// A store that several hubs write to at once, each numbering its own
/// changes (PostgreSQL; see ARCHITECTURE.md, "Several hubs on one
/// database").
///
/// Every hub's group commit checks that the global head is still the one
/// its seqs follow (else the group fails with `StoreError.isHeadMoved` and
/// nothing of it is applied), so the change log stays gap-free and in
/// commit order across hubs. What a hub needs beyond `Store` is to hear
/// that another hub committed — `watchHead` — and to read those changes
/// with what they changed from (`SharedStoreReading`), so that it can bring
/// its cache, its subscribers and its workflow stats up to the new head.
public protocol SharedStore: Store {
    /// Starts reading the global head on a thread of the store's: at once,
    /// whenever any hub commits changes (one notification per group), and
    /// at least every `HeadReading.interval` (a notification is lost while
    /// the store cannot be reached). `onReading` runs on that thread with
    /// every reading, failed ones included. Later calls do nothing; `close`
    /// stops it.
    func watchHead(_ onReading: @escaping @Sendable (HeadReading) -> Void)
    /// The latest reading, nil before the first: for `/healthz` and
    /// `/metrics`. Thread-safe.
    var lastHeadReading: HeadReading? { get }
    /// After a group failed with `isHeadMoved`, the store may keep the
    /// global head locked for a short while, so that the submitter's next
    /// group — its work built again on the new head — cannot lose to yet
    /// another hub. A submitter that has nothing to submit says so here,
    /// and the store lets go at once. Thread-safe.
    func releaseHeldHead()
}

/// Reads of a `SharedStore`.
public protocol SharedStoreReading: StoreReading {
    /// Changes with seq > `after`, ascending, at most `limit`, each record
    /// change with the record it changed (`StoredChange.prior`).
    func changesWithPriors(after: Int64, limit: Int) throws(StoreError) -> [StoredChange]
}

/// One reading of a shared store's global head, timed.
public struct HeadReading: Sendable, Equatable {
    /// Readings come at least this often while the store can be reached,
    /// and attempts to reach it again as often while it cannot.
    public static let intervalMillis: Int64 = 1_000

    /// The highest committed seq of any hub; nil when the store could not
    /// be read.
    public var head: Int64?
    /// How long the read took, a round trip to the server (the time it
    /// took to fail, when it failed).
    public var roundTripMicros: Int64
    /// Why it could not be read (no password in it).
    public var error: String?
    /// When, on the monotonic clock (milliseconds).
    public var atMillis: Int64

    public init(head: Int64?, roundTripMicros: Int64, error: String?, atMillis: Int64) {
        self.head = head
        self.roundTripMicros = roundTripMicros
        self.error = error
        self.atMillis = atMillis
    }

    /// Whether the store answered.
    public var reachable: Bool { head != nil }
}
