import Testing
import TallyEngine
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
        let committed = OneShotSignal()
        store.start { outcome in if outcome.tokens.contains(500) { committed.signal() } }
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
}
