import TallyConcurrency

/// The in-memory backend of the group committer: applies each batch to the
/// tables under their lock (so readers see whole transactions or nothing)
/// and prunes by the same policy as SQLite.
final class MemoryWriter: CommitBackend {
    private let tables: LockedValueBox<MemoryTables>
    private let diagnostics: LockedValueBox<StoreDiagnostics>
    private let hooks: StoreTestHooks
    private var policy: RetentionPolicy
    private(set) var headSeq: Int64 = 0

    init(tables: LockedValueBox<MemoryTables>, diagnostics: LockedValueBox<StoreDiagnostics>, retention: StoreRetention,
         clock: StoreClock, hooks: StoreTestHooks) {
        self.tables = tables
        self.diagnostics = diagnostics
        self.hooks = hooks
        policy = RetentionPolicy(retention: retention, clock: clock)
    }

    func willRun() {}

    func finish() {}

    func apply(_ units: ArraySlice<StoreUnit>, waitForLocks: Bool) -> ApplyResult {
        if let hook = hooks.beforeCommit { hook(units.map(\.token)) }
        if let error = hooks.failCommit?(units.map(\.token)) { return .failed(unitIndex: nil, error) }
        let result = tables.withLock { $0.apply(units, hooks: hooks) }
        if case .committed(let lastSeq) = result { headSeq = lastSeq }
        return result
    }

    var maintenanceDue: Bool {
        let (count, bytes) = tables.withLock { ($0.changes.count, $0.changes.bytes) }
        return policy.isDue(changeCount: count, changeBytes: bytes)
    }

    func maintain() -> Bool {
        let (changeCount, changeBytes) = tables.withLock { ($0.changes.count, $0.changes.bytes) }
        guard let step = policy.nextStep(changeCount: changeCount, changeBytes: changeBytes) else { return false }
        let (excess, byteExcess, cutoffs) = (step.countExcess, step.byteExcess, step.cutoffs)
        var more = step.needsMoreSteps
        let limit = RetentionPolicy.stepLimit
        let (prunedChanges, prunedIdempotency, ageLeft, bytesLeft) = tables.withLock { t -> (Int, Int, Bool, Bool) in
            var through = t.floor
            if excess > 0, let seq = t.changes.seq(atOffset: excess - 1) { through = max(through, seq) }
            var bytesLeft = false
            if byteExcess > 0 {
                let (seq, freed, _) = t.changes.oldestChanges(holding: byteExcess, maxCount: limit)
                if let seq { through = max(through, seq) }
                bytesLeft = freed < byteExcess
            }
            var ageLeft = false
            var prunedIdempotency = 0
            if let cutoffs {
                let (last, scanned, reachedYoung) = t.changes.lastOldChange(before: cutoffs.changes, maxCount: limit)
                if let last { through = max(through, last) }
                let old = t.idempotency.lazy.filter { $0.value.time < cutoffs.idempotency }.prefix(limit).map(\.key)
                for key in old { t.idempotency[key] = nil }
                prunedIdempotency = old.count
                ageLeft = (!reachedYoung && scanned == limit) || prunedIdempotency == limit
            }
            var prunedChanges = 0
            if through > t.floor {
                prunedChanges = t.changes.removeThrough(through)
                t.floor = through
            }
            return (prunedChanges, prunedIdempotency, ageLeft, bytesLeft)
        }
        if bytesLeft { more = true }
        if ageLeft {
            more = true
            policy.checkAgeAgainSoon()
        }
        diagnostics.withLock { d in
            d.pruneSteps += 1
            d.prunedChanges += prunedChanges
            d.prunedIdempotency += prunedIdempotency
        }
        return more
    }
}
