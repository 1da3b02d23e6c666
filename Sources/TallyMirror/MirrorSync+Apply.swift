import TallyClient
import TallyProtocol

/// Applying the hub's changes to the store: each subscription event in
/// transactions that also move its resume point (large ones in chunks).
extension MirrorSync {
    // MARK: Applying the hub's changes

    func handle(_ event: SubscriptionEvent, target: SubscriptionTarget) throws(MirrorStoreError) {
        guard !stopped else { throw MirrorStoreError("the mirror is stopping") }
        switch event {
        case .snapshot(let snapshot):
            try apply(snapshot, target: target)
        case .changes(let changes, let through):
            try apply(changes, through: through, target: target)
        case .failed(let error):
            let message = "the hub refused to mirror \(target.key): \(error.message) (\(error.code))"
            configuration.log?(message)
            try? store.setMeta(["last_error": message, "last_error_at": "\(MirrorStore.now())"])
        case .event, .queryChange:
            break
        }
    }

    static let chunkSize = 2000

    func apply(_ snapshot: Snapshot, target: SubscriptionTarget) throws(MirrorStoreError) {
        switch target {
        case .prefix(let prefix):
            let records = snapshot.records
            let total = records.count
            var start = 0
            repeat {
                let end = min(start + Self.chunkSize, total)
                try store.transaction { () throws(MirrorStoreError) in
                    for record in records[start..<end] {
                        try putHubRecord(record.name, version: record.version, seq: record.seq, data: record.data)
                    }
                    if end == total {
                        let present = Set(records.map(\.name))
                        for row in try store.records(prefix: prefix, withDeleted: true)
                        where !present.contains(row.name) && (row.base != nil || row.version > 0) {
                            try hubRecordGone(row.name, seq: snapshot.seq)
                        }
                        try store.setCursor(target.key, snapshot.seq)
                        try noteSeq(records.lazy.map(\.seq).max() ?? 0)
                    }
                }
                start = end
                applied(end, of: total, target: target)
            } while start < total
        case .record(let name):
            try store.transaction { () throws(MirrorStoreError) in
                if let record = snapshot.records.first {
                    try putHubRecord(name, version: record.version, seq: record.seq, data: record.data)
                } else {
                    try hubRecordGone(name, seq: snapshot.seq)
                }
                try store.setCursor(target.key, snapshot.seq)
                try noteSeq(snapshot.records.first?.seq ?? 0)
            }
        case .list(let name):
            try store.transaction { () throws(MirrorStoreError) in
                if let list = snapshot.list {
                    try store.putList(MirrorList(name: name, version: list.version, seq: list.seq, entries: list.entries))
                } else {
                    try store.removeList(name)
                }
                try store.setCursor(target.key, snapshot.seq)
                try noteSeq(snapshot.list?.seq ?? 0)
            }
        case .path, .topic, .query:
            break
        }
    }

    func apply(_ changes: [Change], through: Int64, target: SubscriptionTarget) throws(MirrorStoreError) {
        let total = changes.count
        var start = 0
        repeat {
            let end = min(start + Self.chunkSize, total)
            try store.transaction { () throws(MirrorStoreError) in
                for change in changes[start..<end] { try apply(change) }
                // Changes come in seq order: the chunk's last is a valid resume point.
                let cursor = end == total ? through : changes[end - 1].seq
                try store.setCursor(target.key, cursor)
                if end > start { try noteSeq(changes[end - 1].seq) }
            }
            start = end
            applied(end, of: total, target: target)
        } while start < total
        // The hub's copies moved: pending writes may now be sendable again.
        if live, !replay.queued.isEmpty { pump() }
    }

    func apply(_ change: Change) throws(MirrorStoreError) {
        if change.isList {
            let list = try store.list(change.name)
            if let list, list.seq >= change.seq { return }
            do {
                if let entries = try change.applied(toEntries: list?.entries) {
                    try store.putList(MirrorList(name: change.name, version: change.version, seq: change.seq, entries: entries))
                } else {
                    try store.removeList(change.name)
                }
            } catch let error as ProtocolError {
                configuration.log?("cannot apply change \(change.seq) to list \(change.name): \(error.message)")
            } catch {
                throw error as? MirrorStoreError ?? MirrorStoreError("\(error)")
            }
            return
        }
        let row = try store.record(change.name)
        if let row, row.seq >= change.seq { return }
        let base: JSONObject?
        do {
            base = try change.applied(to: row?.base)
        } catch {
            // The copy and the hub disagree about the record's shape: take
            // what is known and let `tally verify` show the difference.
            configuration.log?("cannot apply change \(change.seq) to \(change.name): \(error.message)")
            return
        }
        if let base {
            try putHubRecord(change.name, version: change.version, seq: change.seq, data: base)
        } else {
            try hubRecordGone(change.name, seq: change.seq)
        }
    }

    /// The hub's copy of a record changed: the local view follows (with
    /// the pending writes on top, if there are any).
    func putHubRecord(_ name: String, version: Int64, seq: Int64, data: JSONObject) throws(MirrorStoreError) {
        let view = try store.hasPending(name) ? try store.view(of: name, over: data, catalog: catalog) : data
        try store.putRecord(MirrorRecord(name: name, version: version, seq: seq, data: view, base: data, updated: 0))
    }

    func hubRecordGone(_ name: String, seq: Int64) throws(MirrorStoreError) {
        guard try store.hasPending(name) else { return try store.removeRecord(name) }
        let view = try store.view(of: name, over: nil, catalog: catalog)
        try store.putRecord(MirrorRecord(name: name, version: 0, seq: seq, data: view, base: nil, updated: 0))
    }

    /// The seq of the last hub change the mirror holds (`mirror status`).
    func noteSeq(_ seq: Int64) throws(MirrorStoreError) {
        let current = Int64(try store.meta("last_seq") ?? "") ?? 0
        if seq > current { try store.setMeta(["last_seq": "\(seq)"]) }
    }
}
