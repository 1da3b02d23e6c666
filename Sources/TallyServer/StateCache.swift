import TallyEngine
import TallyProtocol
import TallyStore

/// The core's view of records and lists: a bounded cache over the store's
/// committed state, holding every uncommitted change ("pinned") until its
/// commit.
///
/// The invariant that makes reads right: an entry that is not in the cache has
/// no uncommitted change, so the store's committed row is its current state.
/// Pinned entries are never evicted; clean ones are dropped when the cache
/// outgrows its capacity. Startup therefore reads nothing: the cache fills on
/// demand.
final class StateCache: EngineState {
    struct Entry<State> {
        var state: State?
        /// Seq of the uncommitted change that produced `state`; 0 when clean.
        var pinnedSeq: Int64
    }

    /// Keyed by bytes, as the store is (see `ByteKey`).
    private(set) var records: [ByteKey: Entry<RecordState>] = [:]
    private(set) var lists: [ByteKey: Entry<ListState>] = [:]
    /// Uncommitted changes in seq order, to unpin on commit.
    private var pinned: [(seq: Int64, name: String, isList: Bool)] = []
    private var pinnedHead = 0
    /// Clean entries in the order they became clean (loaded or committed):
    /// eviction takes the oldest. A key may appear more than once; a popped
    /// key whose entry is pinned again, or gone, is skipped.
    private var cleanOrder: [(key: ByteKey, isList: Bool)] = []
    private var cleanHead = 0
    let reader: any StoreReading
    let capacity: Int

    init(reader: any StoreReading, capacity: Int) {
        self.reader = reader
        self.capacity = capacity
    }

    // MARK: EngineState

    func record(_ name: String) throws(ProtocolError) -> RecordState? {
        let key = ByteKey(name)
        if let entry = records[key] { return entry.state }
        let state = try Self.load(record: name, from: reader)
        records[key] = Entry(state: state, pinnedSeq: 0)
        cleanOrder.append((key, false))
        return state
    }

    func list(_ name: String) throws(ProtocolError) -> ListState? {
        let key = ByteKey(name)
        if let entry = lists[key] { return entry.state }
        let stored: StoredList?
        do { stored = try reader.list(name) } catch { throw .storage(error) }
        let state = stored.map(ListState.init(stored:))
        lists[key] = Entry(state: state, pinnedSeq: 0)
        cleanOrder.append((key, true))
        return state
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
        switch change.target {
        case .record(_, let after, _): records[ByteKey(change.name)] = Entry(state: after, pinnedSeq: change.seq)
        case .list(_, let after): lists[ByteKey(change.name)] = Entry(state: after, pinnedSeq: change.seq)
        }
        pinned.append((change.seq, change.name, change.isList))
    }

    /// Everything up to `seq` is committed: those entries may be evicted now.
    func committed(through seq: Int64) {
        while pinnedHead < pinned.count, pinned[pinnedHead].seq <= seq {
            let (pinSeq, text, isList) = pinned[pinnedHead]
            let name = ByteKey(text)
            if isList {
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
                if let entry = lists[key], entry.pinnedSeq != 0 { lists[key] = nil }
            } else if let entry = records[key], entry.pinnedSeq != 0 {
                records[key] = nil
            }
        }
        pinned.removeAll(keepingCapacity: true)
        pinnedHead = 0
    }

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
    /// each key's latest position once the queue is much longer than the cache.
    private func compactCleanOrderIfNeeded() {
        guard cleanOrder.count - cleanHead > 2 * capacity + 4096 else { return }
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

    /// Drops the oldest clean entries once the cache outgrows its capacity,
    /// down to 90 % of it. (Dropping in dictionary order instead empties the
    /// low buckets and leaves one long probe run behind: every lookup then
    /// walks it — measured at up to 1 ms per write after 500k records.)
    private func evictIfNeeded() {
        guard records.count + lists.count > capacity else { return }
        let target = capacity * 9 / 10
        while records.count + lists.count > target, cleanHead < cleanOrder.count {
            let (key, isList) = cleanOrder[cleanHead]
            cleanHead += 1
            if isList {
                if lists[key]?.pinnedSeq == 0 { lists[key] = nil }
            } else if records[key]?.pinnedSeq == 0 {
                records[key] = nil
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
        ProtocolError(.storageFailed, "the store could not be read: \(error)")
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
    init(stored: StoredList) {
        self.init(name: stored.name, version: stored.version, seq: stored.seq, created: stored.created,
                  updated: stored.updated, entries: stored.entries)
    }

    var stored: StoredList {
        StoredList(name: name, version: version, seq: seq, created: created, updated: updated, entries: entries)
    }

    func envelope(into writer: inout MessageWriter, nameKey: StaticString = "list") {
        writer.string(nameKey, name)
        writer.int("version", version)
        writer.int("seq", seq)
        writer.int("created", created)
        writer.int("updated", updated)
        writer.value("entries", .array(entries.map(JSONValue.string)))
    }

    func envelope(nameKey: StaticString = "list") -> [UInt8] {
        var writer = MessageWriter()
        envelope(into: &writer, nameKey: nameKey)
        return writer.finish()
    }
}
