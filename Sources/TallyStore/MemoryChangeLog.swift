import CSQLite

/// The in-memory change log: changes ascending by seq, pruned from the
/// front.
struct MemoryChangeLog {
    private var entries: [StoredChange] = []
    /// Entries before this index are pruned (compacted away in bulk).
    private var start = 0
    /// Bytes of the live entries' messages, kept as they come and go.
    private(set) var bytes = 0

    var count: Int { entries.count - start }

    /// Appends (or inserts, when the seq is lower than the last); a seq that
    /// is already there fails as SQLite's primary key would.
    mutating func insert(_ change: StoredChange) throws(StoreError) {
        if let last = entries.last, last.seq >= change.seq, start < entries.count {
            let index = firstIndex(notBelow: change.seq)
            if index < entries.count && entries[index].seq == change.seq {
                throw StoreError(code: StoreError.constraintPrimaryKey, message: "UNIQUE constraint failed: changes.seq",
                                 operation: "insert change (step)")
            }
            entries.insert(change, at: index)
        } else {
            entries.append(change)
        }
        bytes += change.message.count
    }

    /// Undoes `insert`.
    mutating func remove(seq: Int64) {
        let index = firstIndex(notBelow: seq)
        if index < entries.count && entries[index].seq == seq {
            bytes -= entries[index].message.count
            entries.remove(at: index)
        }
    }

    /// The index of the first live change with seq > `seq`.
    func firstIndex(after seq: Int64) -> Int {
        firstIndex { $0 > seq }
    }

    /// The index of the first live change with seq >= `seq`.
    func firstIndex(notBelow seq: Int64) -> Int {
        firstIndex { $0 >= seq }
    }

    /// Binary search for the first live change whose seq passes `isAtOrPast`
    /// (false for a prefix of the log, true for the rest).
    private func firstIndex(where isAtOrPast: (Int64) -> Bool) -> Int {
        var low = start
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if isAtOrPast(entries[middle].seq) {
                high = middle
            } else {
                low = middle + 1
            }
        }
        return low
    }

    /// The seq of the live change at `offset` from the oldest.
    func seq(atOffset offset: Int) -> Int64? {
        start + offset < entries.count ? entries[start + offset].seq : nil
    }

    /// Changes with seq > `after` that pass `filter`, ascending, at most `limit`.
    func changes(after: Int64, limit: Int, where filter: (StoredChange) -> Bool = { _ in true }) -> [StoredChange] {
        var result: [StoredChange] = []
        var index = firstIndex(after: after)
        while index < entries.count && result.count < limit {
            if filter(entries[index]) { result.append(entries[index]) }
            index += 1
        }
        return result
    }

    /// The seq of the last change in the run of oldest changes older than
    /// `cutoff`, looking at `maxCount` at most; how many were old; whether a
    /// young one ended the run (as `SQLiteWriter` finds it).
    func lastOldChange(before cutoff: Int64, maxCount: Int) -> (Int64?, Int, Bool) {
        var last: Int64?
        var scanned = 0
        var index = start
        while index < entries.count && scanned < maxCount {
            guard entries[index].time < cutoff else { return (last, scanned, true) }
            last = entries[index].seq
            scanned += 1
            index += 1
        }
        return (last, scanned, false)
    }

    /// The seq of the last of the oldest changes that together hold at
    /// least `target` bytes (looking at `maxCount` at most; nil when the log
    /// is empty), the bytes they hold, how many were looked at (as
    /// `SQLiteWriter` finds it).
    func oldestChanges(holding target: Int, maxCount: Int) -> (Int64?, Int, Int) {
        var last: Int64?
        var freed = 0
        var index = start
        while freed < target && index < entries.count && index - start < maxCount {
            last = entries[index].seq
            freed += entries[index].message.count
            index += 1
        }
        return (last, freed, index - start)
    }

    /// Prunes every change with seq <= `seq`; returns how many.
    mutating func removeThrough(_ seq: Int64) -> Int {
        let end = firstIndex(after: seq)
        let removed = end - start
        for index in start..<end { bytes -= entries[index].message.count }
        start = end
        if start > 1_024 && start * 2 > entries.count {
            entries.removeFirst(start)
            start = 0
        }
        return removed
    }
}
