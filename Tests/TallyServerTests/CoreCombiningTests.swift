import Dispatch
import Synchronization
import Testing
import TallyConcurrency
import TallyNet
import TallyProtocol
import TallyTestSupport
@testable import TallyServer
@_spi(Testing) @testable import TallyStore

/// Flat combining (ARCHITECTURE.md, "The sync engine"): a thread that brings
/// core work while the core is idle does it in place; while anyone does core
/// work, everything else queues for the core thread, in order.
@Suite("Hub core: combining")
struct CoreCombiningTests {
    @Test func anIdleCoreIsClaimedAndWhatArrivesMeanwhileQueues() {
        let mailbox = CoreMailbox<Int>()
        #expect(mailbox.claim(orPost: [1]), "nobody does core work and nothing waits: the caller may")
        #expect(!mailbox.claim(orPost: [2]), "a second claimant queues instead")
        mailbox.post(3)
        mailbox.release()
        var spare: [Int] = []
        #expect(mailbox.takeAll(reusing: &spare) == [2, 3], "what queued during the claim goes to the core thread, in order")
        #expect(!mailbox.claim(orPost: [4]), "the core thread holds the core until its next take")
        #expect(mailbox.takeAll(reusing: &spare) == [4])
    }

    /// A core thread blocked in `takeAll` must not take work while a claim
    /// runs, and must get what queued meanwhile once the claim ends.
    @Test func theCoreThreadWaitsForAClaimToEnd() {
        let mailbox = CoreMailbox<Int>()
        let taken = LockedValueBox<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        #expect(mailbox.claim(orPost: [1]))
        DispatchQueue.global().async {
            var spare: [Int] = []
            let batch = mailbox.takeAll(reusing: &spare)
            taken.withLock { $0 = batch }
            done.signal()
        }
        mailbox.post(2)
        #expect(done.wait(timeout: .now() + .milliseconds(200)) == .timedOut, "the claim is still running")
        #expect(taken.withLock { $0 }.isEmpty)
        mailbox.release()
        #expect(done.wait(timeout: .now() + .seconds(5)) == .success)
        #expect(taken.withLock { $0 } == [2])
    }

    /// A lone publish with the core idle is handled on the publisher's loop,
    /// not handed to the core thread; subscribers on both loops still get it.
    @Test func aLoneRequestIsHandledInPlace() throws {
        try withHub { hub in
            let metrics = hub.hub.core.metrics
            let inPlace = try countWhileSendingLoneRequests(
                hub, subscribe: #"{"op":"subscribe","topic":"t"}"#,
                counter: { metrics.coreBatchesInPlace.load(ordering: .relaxed) },
                request: { #"{"op":"publish","topic":"t","data":{"n":\#($0)}}"# },
                check: { push, index in #expect(push["data"] == ["n": .int(Int64(index))]) })
            #expect(inPlace >= 10, "most of 20 lone publishes ran in place (\(inPlace))")
            let text = String(decoding: try hub.http("GET", "/metrics").body, as: UTF8.self)
            #expect(text.contains("tally_core_batches_total{thread=\"in_place\"}"))
        }
    }

    /// A lone durable write with the store idle is committed on the loop
    /// that received it (no store-writer wake-up), and still reaches
    /// subscribers on both loops, once, after its commit. (Lone: each sent
    /// once the store has been idle long enough to lend its connection; a
    /// commit slowed by a loaded machine still sends the next to the writer.)
    @Test func aLoneDurableWriteIsCommittedInPlace() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let metrics = hub.hub.core.metrics
            let writer = try #require(hub.hub.core.store as? SQLiteStore).writerProbe
            let inPlace = try countWhileSendingLoneRequests(
                hub, subscribe: #"{"op":"subscribe","name":"lone"}"#,
                counter: { metrics.commitsInPlace.load(ordering: .relaxed) },
                beforeEach: {
                    try waitUntil("the store to be idle", timeoutMillis: messageTimeout) { writer.isParkedAndIdle }
                },
                request: { #"{"op":"set","name":"lone","data":{"n":\#($0)}}"# },
                check: { push, index in #expect(push["version"] == .int(Int64(index))) })
            #expect(inPlace >= 10, "most of 20 lone writes committed in place (\(inPlace))")
            let text = String(decoding: try hub.http("GET", "/metrics").body, as: UTF8.self)
            #expect(text.contains("tally_commits_in_place_total "))
        }
    }

    /// Sends requests 1...20 from one connection, each only after the last
    /// reached four subscribers (checked by `check`), and returns how far
    /// `counter` moved meanwhile.
    private func countWhileSendingLoneRequests(
        _ hub: HubFixture, subscribe: String, counter: () -> Int, beforeEach: () throws -> Void = {},
        request: (Int) -> String, check: (Message, Int) -> Void
    ) throws -> Int {
        let subscribers = try (0..<4).map { _ in try hub.connect() }
        for subscriber in subscribers { try subscriber.ok(subscribe) }
        let sender = try hub.connect()
        let before = counter()
        for index in 1...20 {
            try beforeEach()
            try sender.ok(request(index))
            for subscriber in subscribers { check(try subscriber.push(), index) }
        }
        return counter() - before
    }

    /// Durable writes from many connections at once: every one acknowledged
    /// and pushed once, in seq order, whichever thread did the core's work.
    @Test func concurrentWritersSeeEveryChangeInOrder() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let watcher = try hub.connect()
            try watcher.ok(#"{"op":"subscribe","prefix":"w/"}"#)
            let writers = try (0..<6).map { _ in try hub.connect() }
            let group = DispatchGroup()
            let failures = Atomic<Int>(0)
            for (index, writer) in writers.enumerated() {
                // Each client is used by its own thread only.
                nonisolated(unsafe) let writer = writer
                group.enter()
                DispatchQueue.global().async {
                    for n in 0..<25 where (try? writer.ok(#"{"op":"set","name":"w/\#(index)","data":{"n":\#(n)}}"#)) == nil {
                        failures.add(1, ordering: .relaxed)
                    }
                    group.leave()
                }
            }
            #expect(group.wait(timeout: .now() + .seconds(30)) == .success)
            #expect(failures.load(ordering: .relaxed) == 0)
            var seqs: [JSONValue] = []
            for _ in 0..<150 { seqs.append(try watcher.push()["seq"] ?? .null) }
            #expect(seqs == (1...150).map { JSONValue.int(Int64($0)) }, "gap-free and in order")
        }
    }

    /// A backend that implements `Store` alone (no writer to lend, as a
    /// server database would have) gets every unit through `submit`: lone
    /// writes are acknowledged and pushed after their commits, none of them
    /// in place.
    @Test func aStoreWithoutInPlaceCommitsGetsEveryUnitSubmitted() throws {
        let store = SubmitOnlyStore(MemoryStore())
        let hub = try HubFixture(store: store)
        defer { hub.close() }
        #expect(hub.hub.core.runner.inPlaceStore == nil)
        let subscriber = try hub.connect()
        try subscriber.ok(#"{"op":"subscribe","name":"plain"}"#)
        let sender = try hub.connect()
        for index in 1...5 {
            try sender.ok(#"{"op":"set","name":"plain","data":{"n":\#(index)}}"#)
            #expect(try subscriber.push()["version"] == .int(Int64(index)))
        }
        #expect(hub.hub.core.metrics.commitsInPlace.load(ordering: .relaxed) == 0)
        #expect(store.submitted.load(ordering: .relaxed) >= 5, "every write went through submit")
    }
}

/// `Store` and nothing more, over a `MemoryStore`: what a backend without
/// commit in place offers the hub.
private final class SubmitOnlyStore: Store {
    let base: MemoryStore
    let submitted = Atomic<Int>(0)

    init(_ base: MemoryStore) { self.base = base }

    func makeReader() throws(StoreError) -> any StoreReading { try base.makeReader() }
    func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) { base.start(onCommit: onCommit) }
    func submit(_ unit: StoreUnit) {
        submitted.add(1, ordering: .relaxed)
        base.submit(unit)
    }
    func resumeAfterFailure() { base.resumeAfterFailure() }
    func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError) { try base.applyBeforeStart(units) }
    var health: StoreHealth { base.health }
    func close() { base.close() }
}
