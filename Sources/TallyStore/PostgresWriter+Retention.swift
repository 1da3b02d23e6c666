import TallyPostgres

/// Retention on the PostgreSQL write connection: the same bounded steps as
/// SQLite's (`SQLiteWriter+Retention`), each in its own transaction, the
/// floor moved in the transaction that deletes below it.
///
/// Several hubs on one database each run retention: a step starts by
/// locking the meta row and reading what the log holds now (other hubs'
/// groups moved the counts), so two hubs never prune at once and each
/// decides from the counts as they are.
extension PostgresWriter {
    var maintenanceDue: Bool {
        policy.isDue(changeCount: Int(clamping: meta.changeCount), changeBytes: Int(clamping: meta.changeBytes))
    }

    func maintain() -> Bool {
        guard maintenanceDue else { return false }
        releaseHold()
        var more = false
        var current = meta
        var next = meta
        var prunedIdempotency = 0
        var prunedChanges = 0
        let c = connection
        do throws(PostgresError) {
            if !c.isConnected { try c.reconnect() }
            try c.execute(script: "BEGIN")
            let row = try c.execute(Statements.lockMeta).firstRow()
            current.floor = try row.int64(0)
            current.changeCount = try row.int64(1)
            current.changeBytes = try row.int64(2)
            next = current
            guard let step = policy.nextStep(changeCount: Int(clamping: current.changeCount),
                                             changeBytes: Int(clamping: current.changeBytes)) else {
                try c.execute(script: "ROLLBACK")
                meta = current
                return false
            }
            let (countExcess, byteExcess, cutoffs) = (step.countExcess, step.byteExcess, step.cutoffs)
            more = step.needsMoreSteps
            var through = current.floor
            if countExcess > 0 {
                let rows = try c.execute(Statements.changeSeqAtOffset, [.int8(Int64(countExcess - 1))])
                if let row = rows.first {
                    through = max(through, try row.int64(0))
                } else {
                    // Fewer rows than change_count says: repair the count once.
                    next.changeCount = try c.execute(Statements.countAllChanges).firstRow().int64(0)
                }
            }
            if byteExcess > 0 {
                let rows = try c.execute(Statements.oldestChangeSizes, [.int8(Int64(RetentionPolicy.stepLimit))])
                var last: Int64?
                var freed = 0
                var scanned = 0
                for row in rows where freed < byteExcess {
                    last = try row.int64(0)
                    freed += Int(try row.int64(1))
                    scanned += 1
                }
                if freed >= byteExcess || scanned == RetentionPolicy.stepLimit {
                    if let last { through = max(through, last) }
                    if freed < byteExcess { more = true }
                } else {
                    // The log holds fewer bytes than change_bytes says: repair it once.
                    next.changeBytes = try c.execute(Statements.sumAllBytes).firstRow().int64(0)
                }
            }
            if let cutoffs {
                // Oldest seq first, up to the first change young enough to stay.
                let rows = try c.execute(Statements.oldestChanges, [.int8(Int64(RetentionPolicy.stepLimit))])
                var scanned = 0
                var reachedYoung = false
                for row in rows {
                    guard try row.int64(1) < cutoffs.changes else { reachedYoung = true; break }
                    through = max(through, try row.int64(0))
                    scanned += 1
                }
                prunedIdempotency = try c.execute(Statements.deleteOldIdempotency,
                                                  [.int8(cutoffs.idempotency), .int8(Int64(RetentionPolicy.stepLimit))])
                    .affectedRows
                if (!reachedYoung && scanned == RetentionPolicy.stepLimit)
                    || prunedIdempotency == RetentionPolicy.stepLimit {
                    more = true
                    policy.checkAgeAgainSoon()
                }
            }
            if through > current.floor {
                let prunedBytes = try c.execute(Statements.bytesThrough, [.int8(through)]).firstRow().int64(0)
                prunedChanges = try c.execute(Statements.deleteChangesThrough, [.int8(through)]).affectedRows
                next.changeCount -= Int64(prunedChanges)
                next.changeBytes -= prunedBytes
                next.floor = through
            }
            if next != current {
                try c.execute(Statements.writeMeta, [.int8(next.floor), .int8(next.changeCount), .int8(next.changeBytes)])
            }
            let result = try c.query("COMMIT")
            guard result.commandStatus == "COMMIT" else {
                throw PostgresError(kind: .server, sqlState: "25P02", message: "rolled back (\(result.commandStatus))",
                                    operation: "commit")
            }
        } catch {
            rollBack()
            // A failing step (a server out of disk) is tried again a second later, not after every commit.
            policy.stepFailed()
            diagnostics.withLock { d in
                d.pruneFailures += 1
                d.lastPruneError = StoreError(error)
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
}
