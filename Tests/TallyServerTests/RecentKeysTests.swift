import Testing
import TallyConcurrency
import TallyEngine
import TallyNet
import TallyProtocol
@testable import TallyServer

/// Idempotency keys stay in memory only until their write is committed;
/// from then on the store answers retries.
@Suite("RecentKeys")
struct RecentKeysTests {
    @Test func keysLeaveWhenTheirWriteIsCommitted() {
        var keys = RecentKeys()
        for seq in Int64(1)...3000 { keys[ByteKey("k\(seq)")] = (seq, [UInt8(seq % 256)]) }
        #expect(keys.count == 3000)
        keys.committed(through: 1000)
        #expect(keys.count == 2000)
        #expect(keys[ByteKey("k1000")] == nil)
        #expect(keys[ByteKey("k1001")]?.seq == 1001)
        keys.committed(through: 3000)
        #expect(keys.count == 0)
        keys[ByteKey("again")] = (3001, [])
        keys.committed(through: 3000)
        #expect(keys[ByteKey("again")]?.seq == 3001)
    }

    /// Before, the core kept every key (and its reply) until 100,000 had
    /// gathered: 8 MiB at 840 keyed writes a second. Now none is left once
    /// the writes are acknowledged, and a retry is still answered, from the store.
    @Test func theHubKeepsNoKeyOfACommittedWrite() throws {
        try withHub { hub in
            let client = try hub.connect()
            for i in 0..<200 { try client.ok(#"{"op":"set","name":"k/\#(i % 7)","data":{"i":\#(i)},"idem":"key-\#(i)"}"#) }
            let retry = try client.ok(#"{"op":"set","name":"k/0","data":{"i":-1},"idem":"key-7"}"#)
            #expect(retry["version"] == 2 && retry["name"] == "k/0", "the first answer again: \(retry.text)")
            // Read the core's map on the core thread, after a write of its own.
            let counted = CountdownLatch(count: 1)
            let left = LockedValueBox<Int?>(nil)
            let core = hub.hub.core
            core.submit([Write(name: "probe", action: .set([:]))], as: Actor(user: "test", role: "admin")) { _ in
                left.withLock { $0 = core.recentKeys.count }
                counted.countDown()
            }
            counted.wait()
            #expect(left.withLock { $0 } == 0)
        }
    }
}
