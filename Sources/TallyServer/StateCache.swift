import TallyEngine
import TallyProtocol
import TallyStore

/// The core's view of records and lists: a bounded cache over the store's
/// committed state, holding every uncommitted change ("pinned") until its
/// commit.
///
/// A list's entries are never held whole: the cache keeps a list's row
/// (version, count, …) like a record, and for a list with uncommitted
/// changes the edits those changes made to its entries (`ListEdits`: keys
/// added or removed, whether the rows were dropped), laid over the store's
/// rows when the engine reads them. The edits of a change are dropped when
/// its commit is reported; a failed commit drops them all.
///
/// The invariant that makes reads right: an entry that is not in the cache has
/// no uncommitted change, so the store's committed row is its current state.
/// Pinned entries are never evicted; clean ones are dropped when the cache
/// outgrows its capacity — a count of entries and, because one record may
/// be 200 bytes and the next a megabyte, an estimate of the heap bytes they
/// hold (`HeapFootprint`). Startup therefore reads nothing: the cache fills
/// on demand.
final class StateCache: EngineState {
    struct Entry<State> {
        var state: State?
        /// Seq of the uncommitted change that produced `state`; 0 when clean.
        var pinnedSeq: Int64
        /// Heap bytes the entry holds, key and table slot included.
        var bytes: Int
    }

    /// Keyed by bytes, as the store is (see `ByteKey`).
    private(set) var records: [ByteKey: Entry<RecordState>] = [:]
    private(set) var lists: [ByteKey: Entry<ListState>] = [:]
    /// Uncommitted edits of lists' entries, by list.
    private(set) var listEdits: [ByteKey: ListEdits] = [:]
    /// The sum of the entries' `bytes`.
    private(set) var bytes = 0
    /// Uncommitted changes in seq order, to unpin on commit.
    private var pinned: [(seq: Int64, name: String, isList: Bool)] = []
    private var pinnedHead = 0
    /// Clean entries in the order they became clean (loaded or committed):
    /// eviction takes the oldest. A key may appear more than once; a popped
    /// key whose entry is pinned again, or gone, is skipped.
    private var cleanOrder: [(key: ByteKey, isList: Bool)] = []
    private var cleanHead = 0
    let reader: any StoreReading
    /// Most entries, and most estimated heap bytes, kept beyond the pinned ones.
    let capacity: Int
    let byteCapacity: Int

    init(reader: any StoreReading, capacity: Int, byteCapacity: Int = .max) {
        self.reader = reader
        self.capacity = capacity
        self.byteCapacity = byteCapacity
    }

    // MARK: EngineState

    /// A store shared with other hubs holds their commits before the core
    /// has applied them. While the core answers a read, it sets this: a
    /// state loaded with a newer seq than the core has applied is handed to
    /// it, and when it returns true it has caught up (the entry is in the
    /// cache as of that seq), so the read sees what the hub's pushes will
    /// have said, never ahead of them.
    var readsAhead: ((Int64) -> Bool)?
    /// The highest seq of a state loaded from the store (a write may load
    /// one ahead of the core; see HubCore+SharedStore.swift).
    private(set) var newestLoadedSeq: Int64 = 0

    func record(_ name: String) throws(ProtocolError) -> RecordState? {
        let key = ByteKey(name)
        if let entry = records[key] { return entry.state }
        let state = try Self.load(record: name, from: reader)
        if let state {
            newestLoadedSeq = max(newestLoadedSeq, state.seq)
            if let readsAhead, readsAhead(state.seq), let entry = records[key] { return entry.state }
        }
        put(key, Entry(state: state, pinnedSeq: 0, bytes: Self.footprint(key, state)))
        cleanOrder.append((key, false))
        return state
    }

    func list(_ name: String) throws(ProtocolError) -> ListState? {
        try list(name, rereads: HubCore.maxRereads)
    }

    private func list(_ name: String, rereads: Int) throws(ProtocolError) -> ListState? {
        let key = ByteKey(name)
        if let entry = lists[key] { return entry.state }
        let stored: StoredList?
        var lastKey: ListKey?
        do {
            stored = try reader.list(name)
            // Nothing of this list is uncommitted (it is not cached), so the store's last row is its last entry.
            if stored != nil { lastKey = try reader.listEntries(name, descending: true, after: nil).next()?.key }
        } catch {
            throw .storage(error)
        }
        if let stored {
            newestLoadedSeq = max(newestLoadedSeq, stored.seq)
            // Caught up, the list's row is read again (another hub may have
            // committed meanwhile: a few times, then taken as it is).
            if rereads > 0, let readsAhead, readsAhead(stored.seq) { return try list(name, rereads: rereads - 1) }
        }
        let state = stored.map { ListState(stored: $0, lastKey: lastKey) }
        put(key, Entry(state: state, pinnedSeq: 0, bytes: Self.footprint(key, state)))
        cleanOrder.append((key, true))
        return state
    }

    func listRows(_ name: String, descending: Bool, after: ListKey?) throws(ProtocolError) -> any ListCursor {
        let stored: any StoredListCursor
        do { stored = try reader.listEntries(name, descending: descending, after: after) } catch { throw .storage(error) }
        let rows = StoreListRows(stored)
        guard let edits = listEdits[ByteKey(name)] else { return rows }
        return edits.cursor(over: rows, descending: descending, after: after)
    }

    func listKeys(_ name: String, holding entry: String) throws(ProtocolError) -> [ListKey] {
        let keys: [ListKey]
        do { keys = try reader.listKeys(name, holding: entry) } catch { throw .storage(error) }
        guard let edits = listEdits[ByteKey(name)] else { return keys }
        return edits.keys(holding: entry, baseKeys: keys)
    }

    func listRank(_ name: String, below key: ListKey, holding keys: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]) {
        let reader = reader
        func base(_ keys: [ListKey]) throws(ProtocolError) -> (below: Int, held: [Bool]) {
            do { return try reader.listRank(name, below: key, holding: keys) } catch { throw .storage(error) }
        }
        guard let edits = listEdits[ByteKey(name)] else { return try base(keys) }
        return try edits.rank(below: key, holding: keys, base: base)
    }

    func listRow(_ name: String, at index: Int) throws(ProtocolError) -> ListRow? {
        let reader = reader
        func baseRow(_ index: Int) throws(ProtocolError) -> ListRow? {
            do { return try reader.listEntry(name, at: index) } catch { throw .storage(error) }
        }
        guard let edits = listEdits[ByteKey(name)] else { return try baseRow(index) }
        return try edits.row(at: index, baseRow: baseRow,
                             rank: { key throws(ProtocolError) in
                                 let ranked = try listRank(name, below: key, holding: [key])
                                 return (ranked.below, ranked.held[0])
                             },
                             rows: { after throws(ProtocolError) in try listRows(name, descending: false, after: after) })
    }

    /// Up to `limit` entries of list `name` after `after` (from the first
    /// without), and whether more follow: O(log n + limit).
    func listPage(_ name: String, after: ListKey?, limit: Int) throws(ProtocolError) -> (rows: [ListRow], more: Bool) {
        let cursor = try listRows(name, descending: false, after: after)
        var rows: [ListRow] = []
        while rows.count < limit, let row = try cursor.next() { rows.append(row) }
        return (rows, try cursor.next() != nil)
    }

    // MARK: Bytes

    /// Every insertion and removal goes through these, so `bytes` is the sum.
    private func put(_ key: ByteKey, _ entry: Entry<RecordState>) {
        bytes += entry.bytes - (records.updateValue(entry, forKey: key)?.bytes ?? 0)
    }

    private func put(_ key: ByteKey, _ entry: Entry<ListState>) {
        bytes += entry.bytes - (lists.updateValue(entry, forKey: key)?.bytes ?? 0)
    }

    private func removeRecord(_ key: ByteKey) {
        if let old = records.removeValue(forKey: key) { bytes -= old.bytes }
    }

    private func removeList(_ key: ByteKey) {
        if let old = lists.removeValue(forKey: key) { bytes -= old.bytes }
    }

    /// A table slot (key and entry, at the dictionaries' load of 3/8 to 3/4)
    /// and its place in the clean queue.
    static let recordSlotBytes = 2 * (MemoryLayout<ByteKey>.stride + MemoryLayout<Entry<RecordState>>.stride)
        + 2 * MemoryLayout<(key: ByteKey, isList: Bool)>.stride
    static let listSlotBytes = 2 * (MemoryLayout<ByteKey>.stride + MemoryLayout<Entry<ListState>>.stride)
        + 2 * MemoryLayout<(key: ByteKey, isList: Bool)>.stride

    /// The heap a record entry holds: key, name, data bytes and parsed data
    /// (within a few percent of what glibc reports for typical records).
    static func footprint(_ key: ByteKey, _ state: RecordState?) -> Int {
        var total = recordSlotBytes + HeapFootprint.string(key.string)
        if let state {
            total += HeapFootprint.string(state.name) + HeapFootprint.bytes(state.dataBytes) + state.data.heapBytes
        }
        return total
    }

    static func footprint(_ key: ByteKey, _ state: ListState?) -> Int {
        var total = listSlotBytes + HeapFootprint.string(key.string)
        if let state { total += HeapFootprint.string(state.name) }
        return total
    }

    static func load(record name: String, from reader: any StoreReading) throws(ProtocolError) -> RecordState? {
        let stored: StoredRecord?
        do { stored = try reader.record(name) } catch { throw .storage(error) }
        guard let stored else { return nil }
        return try RecordState(stored: stored)
    }

    // MARK: Changes

    /// Makes an accepted (not yet committed) change the current state.
    func apply(_ change: Change) {
        let key = ByteKey(change.name)
        switch change.target {
        case .record(_, let after, _):
            put(key, Entry(state: after, pinnedSeq: change.seq, bytes: Self.footprint(key, after)))
        case .list(_, let after, let edit):
            put(key, Entry(state: after, pinnedSeq: change.seq, bytes: Self.footprint(key, after)))
            listEdits[key, default: ListEdits()].apply(edit, seq: change.seq)
        }
        pinned.append((change.seq, change.name, change.isList))
    }

    /// Makes a committed record change of another hub the current state
    /// (a shared store; HubCore+SharedStore.swift): clean at once, since
    /// nothing of this hub is uncommitted while it catches up.
    func applyCommitted(_ change: Change) {
        guard case .record(_, let after, _) = change.target else { return }
        let key = ByteKey(change.name)
        put(key, Entry(state: after, pinnedSeq: 0, bytes: Self.footprint(key, after)))
        cleanOrder.append((key, false))
        evictIfNeeded()
    }

    /// Forgets a list's row (another hub changed it): read again from the
    /// store on its next use. Only while nothing of it is uncommitted.
    func forgetList(_ name: String) {
        let key = ByteKey(name)
        if lists[key]?.pinnedSeq == 0 { removeList(key) }
    }

    /// Forgets a record's clean state: read again from the store on its next use.
    func forgetRecord(_ name: String) {
        let key = ByteKey(name)
        if records[key]?.pinnedSeq == 0 { removeRecord(key) }
    }

    /// Forgets every clean entry (the hub lost track of its store's
    /// changes); pinned ones stay.
    func dropAll() {
        for (key, entry) in records where entry.pinnedSeq == 0 { removeRecord(key) }
        for (key, entry) in lists where entry.pinnedSeq == 0 { removeList(key) }
        cleanOrder.removeAll()
        cleanHead = 0
    }

    /// Everything up to `seq` is committed: those entries may be evicted now.
    func committed(through seq: Int64) {
        var editedLists = Set<ByteKey>()
        while pinnedHead < pinned.count, pinned[pinnedHead].seq <= seq {
            let (pinSeq, text, isList) = pinned[pinnedHead]
            let name = ByteKey(text)
            if isList {
                editedLists.insert(name)
                if lists[name]?.pinnedSeq == pinSeq {
                    lists[name]?.pinnedSeq = 0
                    cleanOrder.append((name, true))
                }
            } else if records[name]?.pinnedSeq == pinSeq {
                records[name]?.pinnedSeq = 0
                cleanOrder.append((name, false))
            }
            pinnedHead += 1
        }
        // Once per list, not per change: a write of 1,000 addEntry is 1,000 changes of one list.
        for name in editedLists {
            guard var edits = listEdits.removeValue(forKey: name) else { continue }
            edits.prune(through: seq)
            if !edits.isEmpty { listEdits[name] = edits }
        }
        compactCleanOrderIfNeeded()
        if pinnedHead == pinned.count {
            pinned.removeAll(keepingCapacity: true)
            pinnedHead = 0
        } else if pinnedHead > 4096 {
            pinned.removeFirst(pinnedHead)
            pinnedHead = 0
        }
        evictIfNeeded()
    }

    /// A commit failed: every uncommitted state is forgotten, so those
    /// names are read from the store again on their next use (the store
    /// holds their last committed state). Call after `committed(through:)`
    /// has seen every commit that succeeded.
    func dropUncommitted() {
        for index in pinnedHead..<pinned.count {
            let key = ByteKey(pinned[index].name)
            if pinned[index].isList {
                if let entry = lists[key], entry.pinnedSeq != 0 { removeList(key) }
            } else if let entry = records[key], entry.pinnedSeq != 0 {
                removeRecord(key)
            }
        }
        pinned.removeAll(keepingCapacity: true)
        pinnedHead = 0
        listEdits.removeAll()
    }

    /// Items in the clean queue (tests).
    var cleanQueueCount: Int { cleanOrder.count - cleanHead }

    /// How many uncommitted states are pinned (records and lists; an
    /// upper bound on the records `pendingRecordNames` can return).
    var pendingRecordCount: Int { pinned.count - pinnedHead }

    /// Names of records with uncommitted changes whose names start with `prefix`.
    func pendingRecordNames(prefix: String) -> [String] {
        var names: [String] = []
        for index in pinnedHead..<pinned.count where !pinned[index].isList {
            let name = pinned[index].name
            if name.hasBytePrefix(prefix) { names.append(name) }
        }
        return names
    }

    /// A hot record rewritten many times appears once per commit; keep only
    /// each key's latest position once the queue is much longer than the
    /// cache holds entries (not than it may hold: a cache far below its
    /// capacity would otherwise let the queue of one hot record grow to
    /// twice the capacity, 400,000 items by default).
    private func compactCleanOrderIfNeeded() {
        guard cleanOrder.count - cleanHead > 2 * (records.count + lists.count) + 4096 else { return }
        var seenRecords = Set<ByteKey>()
        var seenLists = Set<ByteKey>()
        var kept: [(key: ByteKey, isList: Bool)] = []
        for index in stride(from: cleanOrder.count - 1, through: cleanHead, by: -1) {
            let item = cleanOrder[index]
            let isNew = item.isList ? seenLists.insert(item.key).inserted : seenRecords.insert(item.key).inserted
            if isNew { kept.append(item) }
        }
        cleanOrder = kept.reversed()
        cleanHead = 0
    }

    /// Drops the oldest clean entries once the cache outgrows its capacity
    /// (in entries or in bytes), down to 90 % of it. (Dropping in dictionary
    /// order instead empties the low buckets and leaves one long probe run
    /// behind: every lookup then walks it — measured at up to 1 ms per write
    /// after 500k records.)
    private func evictIfNeeded() {
        guard records.count + lists.count > capacity || bytes > byteCapacity else { return }
        let target = capacity * 9 / 10, byteTarget = byteCapacity / 10 * 9
        while records.count + lists.count > target || bytes > byteTarget, cleanHead < cleanOrder.count {
            let (key, isList) = cleanOrder[cleanHead]
            cleanHead += 1
            if isList {
                if lists[key]?.pinnedSeq == 0 { removeList(key) }
            } else if records[key]?.pinnedSeq == 0 {
                removeRecord(key)
            }
        }
        if cleanHead > 4096, cleanHead * 2 > cleanOrder.count {
            cleanOrder.removeFirst(cleanHead)
            cleanHead = 0
        }
    }
}

extension ProtocolError {
    static func storage(_ error: StoreError) -> ProtocolError {
        if error.isUnreachable {
            return ProtocolError(.unavailable,
                                 "the hub cannot reach its database (PostgreSQL) to read what this needs: nothing was changed, and no write of this request was acknowledged; retry")
        }
        return ProtocolError(.storageFailed, "the store could not be read: \(error)")
    }
}

extension RecordState {
    /// Stored data was serialized by the hub, so only a broken file fails here.
    init(stored: StoredRecord) throws(ProtocolError) {
        guard case .object(let data)? = try? JSONValue.parse(stored.data, limits: .stored) else {
            throw ProtocolError(.storageFailed, "the stored data of \"\(stored.name)\" is not a JSON object")
        }
        self.init(name: stored.name, version: stored.version, seq: stored.seq, created: stored.created,
                  updated: stored.updated, data: data, dataBytes: stored.data)
    }

    var stored: StoredRecord {
        StoredRecord(name: name, version: version, seq: seq, created: created, updated: updated, data: dataBytes)
    }

    /// The envelope of PROTOCOL.md: name, version, seq, created, updated, data.
    func envelope(into writer: inout MessageWriter) {
        writer.string("name", name)
        writer.int("version", version)
        writer.int("seq", seq)
        writer.int("created", created)
        writer.int("updated", updated)
        writer.raw("data", dataBytes)
    }

    func envelope() -> [UInt8] {
        var writer = MessageWriter(capacity: dataBytes.count + 96)
        envelope(into: &writer)
        return writer.finish()
    }
}

extension ListState {
    init(stored: StoredList, lastKey: ListKey?) {
        self.init(name: stored.name, version: stored.version, seq: stored.seq, created: stored.created,
                  updated: stored.updated, count: Int(stored.count), lastKey: lastKey)
    }

    var stored: StoredList {
        StoredList(name: name, version: version, seq: seq, created: created, updated: updated, count: Int64(count))
    }

    /// The envelope of PROTOCOL.md with one page of entries: `more` and
    /// `cursor` (the last entry's key) when entries follow the page.
    func envelope(into writer: inout MessageWriter, page: (rows: [ListRow], more: Bool),
                  nameKey: StaticString = "list") {
        writer.string(nameKey, name)
        writer.int("version", version)
        writer.int("seq", seq)
        writer.int("created", created)
        writer.int("updated", updated)
        writer.value("entries", .array(page.rows.map { .string($0.entry) }))
        if page.more, let last = page.rows.last {
            writer.int("count", Int64(count))
            writer.bool("more", true)
            writer.string("cursor", last.key.description)
        }
    }

    func envelope(page: (rows: [ListRow], more: Bool), nameKey: StaticString = "list") -> [UInt8] {
        var writer = MessageWriter()
        envelope(into: &writer, page: page, nameKey: nameKey)
        return writer.finish()
    }
}

/// The store's rows of one list, as the engine reads them.
final class StoreListRows: ListCursor {
    private let stored: any StoredListCursor

    init(_ stored: any StoredListCursor) { self.stored = stored }

    func next() throws(ProtocolError) -> ListRow? {
        do { return try stored.next() } catch { throw .storage(error) }
    }
}
