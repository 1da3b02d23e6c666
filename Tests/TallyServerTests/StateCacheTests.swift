import Testing
import TallyConcurrency
import TallyEngine
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyStore

/// The core's record cache over a store: bounded, never evicting what is not
/// yet committed, and reading through to the store on a miss.
@Suite("StateCache")
struct StateCacheTests {
    static func record(_ name: String, _ n: Int, seq: Int64) -> RecordState {
        let data: JSONObject = ["n": .number(JSONNumber(n))]
        return RecordState(name: name, version: 1, seq: seq, created: 1, updated: 1, data: data,
                           dataBytes: JSONValue.object(data).serialized())
    }

    static func change(_ state: RecordState) -> Change {
        Change(seq: state.seq, time: 1, name: state.name,
               target: .record(before: nil, after: state, scope: .whole), push: [], reply: [:])
    }

    @Test func missesReadTheStoreAndTheCacheStaysBounded() throws {
        let store = MemoryStore()
        let committed = CountdownLatch(count: 1)
        store.start { outcome in if outcome.tokens.contains(500) { committed.countDown() } }
        defer { store.close() }
        for i in 1...500 {
            store.submit(StoreUnit(mutations: [.putRecord(Self.record("r/\(i)", i, seq: Int64(i)).stored)],
                                   changes: [], token: UInt64(i)))
        }
        committed.wait()
        let cache = StateCache(reader: try store.makeReader(), capacity: 50)
        for round in 0..<3 {
            for i in 1...500 {
                let state = try #require(try cache.record("r/\(i)"), "round \(round), r/\(i)")
                #expect(state.data["n"] == .number(JSONNumber(i)))
                cache.committed(through: 0)  // runs eviction
                #expect(cache.records.count <= 51)
            }
        }
        #expect(try cache.record("r/missing") == nil)
    }

    @Test func uncommittedStatesAreNeverEvicted() throws {
        let store = MemoryStore()
        let cache = StateCache(reader: try store.makeReader(), capacity: 10)
        for i in 1...100 { cache.apply(Self.change(Self.record("p/\(i)", i, seq: Int64(i)))) }
        cache.committed(through: 50)
        // Half are committed and may go; the 50 pinned ones must all stay.
        for i in 51...100 { #expect(cache.records[ByteKey("p/\(i)")]?.state?.seq == Int64(i)) }
        #expect(cache.records.count <= 59)
        #expect(cache.pendingRecordNames(prefix: "p/").count == 50)
        cache.committed(through: 100)
        #expect(cache.records.count <= 10)
        #expect(cache.pendingRecordNames(prefix: "p/").isEmpty)
    }

    /// The sum the cache keeps equals its entries' footprints, recounted.
    static func recount(_ cache: StateCache) -> Int {
        cache.records.reduce(0) { $0 + StateCache.footprint($1.key, $1.value.state) }
            + cache.lists.reduce(0) { $0 + StateCache.footprint($1.key, $1.value.state) }
    }

    /// Orders with their history take 2 KiB each; 200,000 of them by count
    /// was 400 MiB. The byte bound holds whatever the sizes, and what the
    /// cache counts is what its entries hold.
    @Test func theCacheStaysUnderItsByteBound() throws {
        let store = MemoryStore()
        let cache = StateCache(reader: try store.makeReader(), capacity: 200_000, byteCapacity: 256 << 10)
        var seq: Int64 = 0
        for i in 0..<2000 {
            // Sizes from a few bytes to 20 KiB, parsed trees of every shape.
            let big = String(repeating: "x", count: (i * 7919) % 20_000)
            let data: JSONObject = ["n": .number(JSONNumber(i)), "text": .string(big),
                                    "history": .array((0..<(i % 6)).map { .object(["to": .string("s\($0)"), "time": 1]) })]
            seq += 1
            let state = RecordState(name: "r/\(i % 700)", version: 1, seq: seq, created: 1, updated: 1, data: data,
                                    dataBytes: JSONValue.object(data).serialized())
            cache.apply(Self.change(state))
            if i % 3 == 0 { _ = try cache.record("missing/\(i)") }
            if i % 5 == 0 {
                cache.committed(through: seq)
                #expect(cache.bytes <= 256 << 10, "after \(i) writes: \(cache.bytes) bytes")
            }
            #expect(cache.bytes == Self.recount(cache))
        }
        cache.committed(through: seq)
        #expect(cache.bytes <= 256 << 10)
        // Array capacities follow the allocator (malloc_usable_size), so under
        // ThreadSanitizer, whose allocator rounds up further, fewer fit (8).
        #expect(cache.records.count > 5, "the bound leaves room for the small ones")
    }

    /// A failed commit drops the uncommitted states, and their bytes with them.
    @Test func droppingUncommittedStatesKeepsTheByteCount() throws {
        let store = MemoryStore()
        let cache = StateCache(reader: try store.makeReader(), capacity: 1000)
        for i in 1...20 { cache.apply(Self.change(Self.record("d/\(i)", i, seq: Int64(i)))) }
        cache.committed(through: 10)
        cache.dropUncommitted()
        #expect(cache.records[ByteKey("d/15")] == nil)
        #expect(cache.records[ByteKey("d/5")]?.state?.seq == 5)
        #expect(cache.bytes == Self.recount(cache))
        #expect(cache.pendingRecordNames(prefix: "d/").isEmpty)
    }

    /// Pinned entries count but are never dropped for the byte bound either.
    @Test func pinnedEntriesStayWhateverTheirSize() throws {
        let store = MemoryStore()
        let cache = StateCache(reader: try store.makeReader(), capacity: 1000, byteCapacity: 64 << 10)
        let data: JSONObject = ["text": .string(String(repeating: "y", count: 30_000))]
        for i in 1...4 {
            cache.apply(Self.change(RecordState(name: "p/\(i)", version: 1, seq: Int64(i), created: 1, updated: 1,
                                                data: data, dataBytes: JSONValue.object(data).serialized())))
        }
        cache.committed(through: 2)
        #expect(cache.records[ByteKey("p/3")] != nil && cache.records[ByteKey("p/4")] != nil)
        #expect(cache.bytes > 64 << 10, "two pinned 60 KiB entries are over the bound and stay")
        cache.committed(through: 4)
        #expect(cache.bytes <= 64 << 10)
    }

    /// One hot record rewritten over and over: the queue of clean entries
    /// stays near the number of entries, not near twice the capacity
    /// (which let it grow to 400,000 items, 10 MiB, for a single record).
    @Test func aHotRecordDoesNotGrowTheCleanQueue() throws {
        let store = MemoryStore()
        let cache = StateCache(reader: try store.makeReader(), capacity: 200_000)
        var longest = 0
        for seq in Int64(1)...20_000 {
            cache.apply(Self.change(Self.record("hot", Int(seq), seq: seq)))
            cache.committed(through: seq)
            longest = max(longest, cache.cleanQueueCount)
        }
        #expect(cache.records.count == 1)
        #expect(longest <= 2 * 1 + 4097)
    }
}

/// A list's uncommitted edits laid over the store's rows: the engine reads
/// the same before, while and after their commits land, and a failed commit
/// leaves the store's rows.
@Suite("StateCache lists")
struct StateCacheListTests {
    final class Committer {
        let store = MemoryStore()
        /// Signalled by the commit of the unit being waited for.
        let waiting = LockedValueBox<(token: UInt64, signal: CountdownLatch)?>(nil)
        init() {
            store.start { [waiting] outcome in
                waiting.withLock { current in
                    if let current, outcome.tokens.contains(current.token) { current.signal.countDown() }
                }
            }
        }
        func commit(_ changes: [Change]) {
            var mutations: [StoreMutation] = []
            for change in changes {
                guard case .list(_, let after, let edit) = change.target else { continue }
                mutations.append(after.map { .putList($0.stored) } ?? .deleteList(change.name))
                HubCore.mutations(of: edit, list: change.name, into: &mutations)
            }
            let token = UInt64(changes.last!.seq)
            let signal = CountdownLatch(count: 1)
            waiting.withLock { $0 = (token, signal) }
            store.submit(StoreUnit(mutations: mutations, token: token))
            signal.wait()
        }
    }

    static func entries(_ cache: StateCache, _ name: String) throws -> [String] {
        let cursor = try cache.listRows(name, descending: false, after: nil)
        var entries: [String] = []
        while let row = try cursor.next() { entries.append(row.entry) }
        return entries
    }

    @Test func pendingEditsReadTheSameAsCommitsLand() throws {
        let committer = Committer()
        defer { committer.store.close() }
        var cache = StateCache(reader: try committer.store.makeReader(), capacity: 100)
        let engine = Engine()
        var seq: Int64 = 0
        func apply(_ writes: [Write]) throws -> [Change] {
            let changes = try engine.apply(writes, atomic: writes.count > 1, to: &cache, firstSeq: seq + 1, now: 1)
            for change in changes { cache.apply(change) }
            seq += Int64(changes.count)
            return changes
        }
        let first = try apply([Write(name: "l", action: .setEntries(["a", "b", "c"]))])
        let second = try apply([Write(name: "l", action: .addEntry("x", at: 1)),
                                Write(name: "l", action: .removeEntry("c", at: nil)),
                                Write(name: "l", action: .addEntry("z", at: nil))])
        let third = try apply([Write(name: "l", action: .removeEntry("a", at: 0))])
        let expected = ["x", "b", "z"]
        #expect(try Self.entries(cache, "l") == expected)
        // The store commits behind the core's back: the view does not change.
        committer.commit(first)
        committer.commit(second)
        #expect(try Self.entries(cache, "l") == expected)
        cache.committed(through: first.last!.seq)
        #expect(try Self.entries(cache, "l") == expected)
        cache.committed(through: second.last!.seq)
        #expect(cache.listEdits[ByteKey("l")] != nil, "the third change is not committed")
        #expect(try Self.entries(cache, "l") == expected)
        // The third change's commit fails: the store's rows are the truth again.
        cache.dropUncommitted()
        #expect(cache.listEdits.isEmpty)
        #expect(try cache.list("l")?.count == 4)
        #expect(try Self.entries(cache, "l") == ["a", "x", "b", "z"])
        _ = third
    }
}
