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
    let reader: any StoreReading
    let capacity: Int

    init(reader: any StoreReading, capacity: Int) {
        self.reader = reader
        self.capacity = capacity
    }

    // MARK: EngineState

    func record(_ name: String) throws(ProtocolError) -> RecordState? {
        if let entry = records[ByteKey(name)] { return entry.state }
        let state = try Self.load(record: name, from: reader)
        records[ByteKey(name)] = Entry(state: state, pinnedSeq: 0)
        return state
    }

    func list(_ name: String) throws(ProtocolError) -> ListState? {
        if let entry = lists[ByteKey(name)] { return entry.state }
        let stored: StoredList?
        do { stored = try reader.list(name) } catch { throw .storage(error) }
        let state = stored.map(ListState.init(stored:))
        lists[ByteKey(name)] = Entry(state: state, pinnedSeq: 0)
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
                if lists[name]?.pinnedSeq == pinSeq { lists[name]?.pinnedSeq = 0 }
            } else if records[name]?.pinnedSeq == pinSeq {
                records[name]?.pinnedSeq = 0
            }
            pinnedHead += 1
        }
        if pinnedHead == pinned.count {
            pinned.removeAll(keepingCapacity: true)
            pinnedHead = 0
        } else if pinnedHead > 4096 {
            pinned.removeFirst(pinnedHead)
            pinnedHead = 0
        }
        evictIfNeeded()
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

    private func evictIfNeeded() {
        if records.count > capacity {
            let excess = records.count - capacity * 9 / 10
            let victims = records.lazy.filter { $0.value.pinnedSeq == 0 }.prefix(excess).map(\.key)
            for name in Array(victims) { records[name] = nil }
        }
        if lists.count > capacity / 8 {
            let excess = lists.count - capacity / 10
            let victims = lists.lazy.filter { $0.value.pinnedSeq == 0 }.prefix(excess).map(\.key)
            for name in Array(victims) { lists[name] = nil }
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
        var limits = JSONLimits()
        limits.maxBytes = Int.max
        limits.maxStringBytes = Int.max
        limits.maxArrayElements = Int.max
        limits.maxObjectMembers = Int.max
        limits.maxDepth = 512
        guard case .object(let data)? = try? JSONValue.parse(stored.data, limits: limits) else {
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
