import CSQLite
import TallySQLite

/// Retention on the write connection: bounded prune steps in their own
/// transactions, after commits (see "Retention" in Store.swift). The
/// statements are prepared with the writer's others, in its initializer.
extension SQLiteWriter {
    // MARK: Retention

    var maintenanceDue: Bool {
        policy.isDue(changeCount: Int(clamping: meta.changeCount), changeBytes: Int(clamping: meta.changeBytes))
    }

    func maintain() -> Bool {
        guard let step = policy.nextStep(changeCount: Int(clamping: meta.changeCount),
                                         changeBytes: Int(clamping: meta.changeBytes)) else { return false }
        let (countExcess, byteExcess, cutoffs) = (step.countExcess, step.byteExcess, step.cutoffs)
        var more = step.needsMoreSteps
        var next = meta
        var prunedIdempotency = 0
        var prunedChanges = 0
        do throws(StoreError) {
            try begin.run()
            var through = meta.floor
            if countExcess > 0 {
                if let seq = try changeSeq(atOffset: countExcess - 1) {
                    through = max(through, seq)
                } else {
                    // Fewer rows than change_count says: repair the count (O(n), once) instead of
                    // coming back after every commit.
                    next.changeCount = try countChanges()
                    try write(next)
                }
            }
            if byteExcess > 0 {
                let (seq, freed, scanned) = try oldestChanges(holding: byteExcess)
                if freed >= byteExcess || scanned == RetentionPolicy.stepLimit {
                    if let seq { through = max(through, seq) }
                    if freed < byteExcess { more = true }
                } else {
                    // The whole log holds fewer bytes than change_bytes says: repair it (O(n),
                    // once) and let the next step decide on the true figure.
                    next.changeBytes = try sum(sumAllBytes)
                    try write(next)
                }
            }
            if let cutoffs {
                // Oldest seq first, up to the first change young enough to stay: the log is
                // pruned from its start only, so "every change after floor_seq" stays true.
                let (oldThrough, scanned, reachedYoung) = try lastOldChange(before: cutoffs.changes)
                if let oldThrough { through = max(through, oldThrough) }
                try deleteOldIdempotency.bind(1, cutoffs.idempotency)
                try deleteOldIdempotency.bind(2, Int64(RetentionPolicy.stepLimit))
                try deleteOldIdempotency.run()
                prunedIdempotency = Int(sqlite3_changes64(connection.db))
                if (!reachedYoung && scanned == RetentionPolicy.stepLimit)
                    || prunedIdempotency == RetentionPolicy.stepLimit {
                    more = true
                    policy.checkAgeAgainSoon()
                }
            }
            if through > meta.floor {
                try bytesThrough.bind(1, through)
                let prunedBytes = try sum(bytesThrough)
                try deleteChangesThrough.bind(1, through)
                try deleteChangesThrough.run()
                prunedChanges = Int(sqlite3_changes64(connection.db))
                next.changeCount -= Int64(prunedChanges)
                next.changeBytes -= prunedBytes
                next.floor = through
                try write(next)
            }
            try commit.run()
        } catch {
            rollBack()
            // A full disk fails every step until it has room: try again in a second, not after
            // every commit.
            policy.stepFailed()
            diagnostics.withLock { d in
                d.pruneFailures += 1
                d.lastPruneError = error
            }
            return false
        }
        meta = next
        diagnostics.withLock { d in
            d.pruneSteps += 1
            d.prunedChanges += prunedChanges
            d.prunedIdempotency += prunedIdempotency
        }
        return more
    }

    /// The seq of the last of the oldest changes that together hold at
    /// least `bytes` (looking at `stepLimit` changes at most; nil when the
    /// log is empty), the bytes they hold, how many were looked at.
    private func oldestChanges(holding bytes: Int) throws(StoreError) -> (Int64?, Int, Int) {
        try oldestChangeSizes.bind(1, Int64(RetentionPolicy.stepLimit))
        defer { oldestChangeSizes.reset() }
        var last: Int64?
        var freed = 0
        var scanned = 0
        while freed < bytes, try oldestChangeSizes.step() {
            last = oldestChangeSizes.int64(0)
            freed += Int(oldestChangeSizes.int64(1))
            scanned += 1
        }
        return (last, freed, scanned)
    }

    private func sum(_ statement: SQLiteStatement) throws(StoreError) -> Int64 {
        defer { statement.reset() }
        return try statement.step() ? statement.int64(0) : 0
    }

    private func changeSeq(atOffset offset: Int) throws(StoreError) -> Int64? {
        try changeSeqAtOffset.bind(1, Int64(offset))
        defer { changeSeqAtOffset.reset() }
        return try changeSeqAtOffset.step() ? changeSeqAtOffset.int64(0) : nil
    }

    private func countChanges() throws(StoreError) -> Int64 {
        defer { countAllChanges.reset() }
        return try countAllChanges.step() ? countAllChanges.int64(0) : 0
    }

    /// The seq of the last change in the run of oldest changes older than
    /// `cutoff`, looking at `stepLimit` changes at most; how many were old;
    /// whether a young one ended the run.
    private func lastOldChange(before cutoff: Int64) throws(StoreError) -> (Int64?, Int, Bool) {
        try oldestChanges.bind(1, Int64(RetentionPolicy.stepLimit))
        defer { oldestChanges.reset() }
        var last: Int64?
        var scanned = 0
        while try oldestChanges.step() {
            guard oldestChanges.int64(1) < cutoff else { return (last, scanned, true) }
            last = oldestChanges.int64(0)
            scanned += 1
        }
        return (last, scanned, false)
    }
}
