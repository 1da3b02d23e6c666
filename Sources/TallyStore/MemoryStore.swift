import TallyConcurrency

/// The store without a disk, for tests and `--data :memory:`: the same
/// tables in dictionaries and arrays, the same group committer on its own
/// writer thread, the same retention. Code written against it behaves as it
/// will with SQLiteStore; everything is gone when the process ends.
public final class MemoryStore: InPlaceCommitting {
    private let tables: LockedValueBox<MemoryTables>
    let committer: GroupCommitter
    let diagnostics: LockedValueBox<StoreDiagnostics>

    /// - Parameters:
    ///   - retention: how much change log and idempotency to keep.
    ///   - clock: compared with change and idempotency times for age-based retention.
    public convenience init(retention: StoreRetention = .init(), clock: StoreClock = .system) {
        self.init(retention: retention, clock: clock, hooks: StoreTestHooks())
    }

    /// With test hooks in the writer (`StoreTestHooks`).
    @_spi(Testing) public init(retention: StoreRetention, clock: StoreClock, hooks: StoreTestHooks) {
        let tables = LockedValueBox(MemoryTables())
        let diagnostics = LockedValueBox(StoreDiagnostics())
        self.tables = tables
        self.diagnostics = diagnostics
        committer = GroupCommitter(backend: MemoryWriter(tables: tables, diagnostics: diagnostics,
                                                         retention: retention, clock: clock, hooks: hooks),
                                   lending: hooks.lending ?? .standard)
    }

    deinit {
        committer.close()
    }

    public func makeReader() throws(StoreError) -> any StoreReading {
        MemoryReader(tables: tables)
    }

    public func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) {
        committer.start(onCommit: onCommit)
    }

    public func submit(_ unit: StoreUnit) {
        committer.submit(unit, wakeWriter: true)
    }

    public func submit(_ unit: StoreUnit, wakeWriter: Bool) {
        committer.submit(unit, wakeWriter: wakeWriter)
    }

    public func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError) {
        try committer.applyBeforeStart(units)
    }

    public func commitQueued() {
        committer.commitQueued()
    }

    public func resumeAfterFailure() {
        committer.resumeAfterFailure()
    }

    public var health: StoreHealth {
        diagnostics.withLock { $0.health }
    }

    public func close() {
        committer.close()
    }
}
