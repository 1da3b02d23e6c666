@preconcurrency import Glibc
import Dispatch
import Testing
import TallyConcurrency
import TallyNet
import TallyProtocol
@testable import TallyServer
@_spi(Testing) @testable import TallyStore
import TallyTestSupport
import TallySQLite

/// `/v1/resolve` reads a code index kept in the store (`record_index`,
/// id `HubCore.codeIndexID`), moved by every item write: nothing is read
/// per start or per first resolve, whatever the number of items.
@Suite struct HubResolveIndexTests {
    func resolve(_ hub: HubFixture, _ code: String) throws -> String? {
        let result = try hub.http("GET", "/v1/resolve/\(code)")
        guard result.status == 200 else {
            #expect(result.status == 404, "\(code): \(String(decoding: result.body, as: UTF8.self))")
            return nil
        }
        return try result.json["name"]?.stringValue
    }

    @Test func codesFollowItemWritesAndSurviveARestart() throws {
        let directory = try TemporaryDirectory(prefix: "tally-resolve")
        try withHub(dataDirectory: directory.path) { hub throws in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"items/drill","data":{"sku":"SKU-1","serials":["SN9"],"stock":1}}"#)
            try client.ok(#"{"op":"set","name":"items/saw","data":{"sku":"SKU-7"}}"#)
            #expect(try resolve(hub, "sku-1") == "items/drill")
            #expect(try resolve(hub, "SN9") == "items/drill")
            #expect(try resolve(hub, "DRILL") == "items/drill", "the id is a code")
            // A changed SKU moves; a serial dropped is gone.
            try client.ok(#"{"op":"set","name":"items/drill","data":{"sku":"SKU-2","stock":1}}"#)
            #expect(try resolve(hub, "SKU-1") == nil)
            #expect(try resolve(hub, "SN9") == nil)
            #expect(try resolve(hub, "SKU-2") == "items/drill")
            // Two items with one code: the first by name.
            try client.ok(#"{"op":"set","name":"items/anvil","data":{"codes":["sku-7"]}}"#)
            #expect(try resolve(hub, "SKU-7") == "items/anvil")
            try client.ok(#"{"op":"delete","name":"items/anvil"}"#)
            #expect(try resolve(hub, "SKU-7") == "items/saw")
            let reader = try hub.storeReader()
            #expect(try reader.builtIndexes().contains(HubCore.codeIndexID))
            #expect(try reader.indexedNames(index: HubCore.codeIndexID, value: Array("sku-2".utf8), prefix: "items/",
                                            after: nil, limit: 10) == ["items/drill"])
            #expect(try reader.indexedNames(index: HubCore.codeIndexID, value: Array("sku-1".utf8), prefix: "items/",
                                            after: nil, limit: 10) == [])
        }
        // The rows stay: a restart reads them.
        try withHub(dataDirectory: directory.path) { hub throws in
            #expect(try resolve(hub, "sku-2") == "items/drill")
            #expect(try resolve(hub, "sku-7") == "items/saw")
        }
        // A store from before the code index builds it once, at start.
        let raw = try SQLiteConnection(path: directory.path + "/" + SQLiteStore.fileName, role: .writer, synchronous: .full)
        try raw.execute("DELETE FROM record_index WHERE idx = '\(HubCore.codeIndexID)'; DELETE FROM record_indexes WHERE idx = '\(HubCore.codeIndexID)'")
        raw.close()
        try withHub(dataDirectory: directory.path) { hub throws in
            #expect(try resolve(hub, "SKU-2") == "items/drill")
            #expect(try hub.storeReader().builtIndexes().contains(HubCore.codeIndexID))
        }
    }

    /// An item accepted but not committed yet is found: the index's rows
    /// are committed ones, and the uncommitted items are laid over them.
    /// The answer itself waits for the commit (nothing uncommitted is
    /// shown), so the resolve is sent from another thread while the commit
    /// is held, seen held (`heldOutputs`), and read once it is let go.
    @Test func anUncommittedItemIsFound() throws {
        let entered = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)
        let holding = LockedValueBox(false)
        let hooks = StoreTestHooks(beforeCommit: { _ in
            guard holding.withLock({ held in defer { held = false }; return held }) else { return }
            entered.signal()
            released.wait()
        }, lending: LendingRule(afterIdleNanos: .max, maxCommitNanos: 0))
        let directory = try TemporaryDirectory(prefix: "tally-resolve")
        let store = try SQLiteStore(directory: directory.path, durability: .full, retention: StoreRetention(),
                                    clock: .system, hooks: hooks)
        let hub = try HubFixture(dataDirectory: directory.path, store: store)
        defer { hub.close() }
        let client = try hub.connect()
        try client.ok(#"{"op":"set","name":"items/old","data":{"sku":"OLD"}}"#)
        holding.withLock { $0 = true }
        client.send(#"{"op":"set","id":1,"name":"items/new","data":{"sku":"NEW-1"}}"#)
        #expect(entered.wait(timeout: .now() + 5) == .success, "the commit reached the hook")
        let heldBefore = hub.hub.core.metrics.heldOutputs.load(ordering: .relaxed)
        let answer = LockedValueBox<String??>(nil)
        let done = DispatchSemaphore(value: 0)
        let port = hub.port
        DispatchQueue.global().async {
            let result = try? HTTPResult.fetch(port: port, "GET", "/v1/resolve/new-1", headers: [:], body: nil)
            answer.withLock { $0 = .some(try? result?.json["name"]?.stringValue) }
            done.signal()
        }
        // The core answered it while the commit is held: its response waits
        // for the commit beside the set's reply.
        try waitUntil("the resolve held behind the commit", timeoutMillis: 5_000) {
            hub.hub.core.metrics.heldOutputs.load(ordering: .relaxed) >= heldBefore + 1
        }
        released.signal()
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(answer.withLock { $0 } == .some("items/new"))
        #expect(try client.next()["ok"] == true)
        #expect(try resolve(hub, "old") == "items/old")
    }
}
