import Dispatch
@preconcurrency import Glibc
import Testing
import TallyConcurrency
import TallyNet
import TallyProtocol
@testable import TallyServer
@_spi(Testing) @testable import TallyStore
import TallyTestSupport

// A failed commit (a full disk) is answered, not fatal (ARCHITECTURE.md,
// "Acknowledged means durable"): the writes in it and behind it get
// `storage_failed`, nothing of them is pushed, the hub's state goes back to
// what the store holds, and once the disk has room the next write takes the
// next gap-free seq. The disk is a store hook that fails every COMMIT while
// it is "full" (the same error SQLite gives when the WAL cannot grow).

/// The two stores a hub runs on.
enum StoreKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case memory
    case sqlite
    var testDescription: String { rawValue }
}

@Suite("Hub: storage faults")
struct HubStorageFaultTests {
    @Test(arguments: StoreKind.allCases)
    func aFailedCommitIsAnsweredRolledBackAndTheHubGoesOn(kind: StoreKind) throws {
        let disk = DiskFault()
        let directory = try TemporaryDirectory(prefix: "tally-faults")
        try withFaultyHub(kind, disk: disk, directory: directory) { hub in
            let watcher = try hub.connect()
            try watcher.ok(#"{"op":"subscribe","prefix":"f/"}"#)
            let writer = try hub.connect()
            #expect(try writer.ok(#"{"op":"set","name":"f/1","data":{"n":1}}"#)["seq"] == 1)
            #expect(try writer.ok(#"{"op":"increment","name":"f/count","path":"n"}"#)["seq"] == 2)
            #expect(try watcher.push()["seq"] == 1)
            #expect(try watcher.push()["seq"] == 2)

            disk.isFull = true
            let failed = try writer.request(#"{"op":"set","name":"f/2","data":{"n":2},"id":"w2"}"#)
            #expect(failed["ok"] == false)
            #expect(failed["id"] == "w2")
            #expect(failed.errorCode == "storage_failed")
            #expect(failed.error?["message"]?.stringValue?.contains("database or disk is full") == true)
            #expect(try writer.request(#"{"op":"increment","name":"f/count","path":"n"}"#).errorCode == "storage_failed")
            // Pipelined: each later write stood on an earlier one's state.
            for n in 3...5 { writer.send(#"{"op":"set","name":"f/\#(n)","data":{},"id":\#(n)}"#) }
            for n in 3...5 {
                let reply = try writer.next()
                #expect(reply["id"] == .int(Int64(n)) && reply.errorCode == "storage_failed", "\(reply.text)")
            }
            let rest = try hub.http("PUT", "/v1/records/f/6", body: #"{"n":6}"#)
            #expect(rest.status == 503)
            #expect(rest.header("Retry-After") == "5")
            #expect(try rest.json["error"]?["code"] == "storage_failed")

            // Still up: reads are answered, from committed state only.
            #expect(try writer.ok(#"{"op":"get","name":"f/1"}"#)["data"] == ["n": 1])
            #expect(try writer.request(#"{"op":"get","name":"f/2"}"#).errorCode == "not_found")
            #expect(try hub.http("GET", "/v1/records/f/count").json["data"] == ["n": 1])
            #expect(try hub.http("GET", "/healthz").status == 200)
            try watcher.expectNothingPending()
            let metrics = String(decoding: try hub.http("GET", "/metrics").body, as: UTF8.self)
            #expect(metrics.contains("tally_commit_failures_total"))
            #expect(!metrics.contains("tally_commit_failures_total 0\n"))
            #expect(metrics.contains("tally_checkpoint_failures_total 0\n"), "counted, and none failed here")
            #expect(metrics.contains("tally_prune_failures_total 0\n"))

            // Room again: the next writes succeed with the next gap-free seqs.
            disk.isFull = false
            let again = try writer.ok(#"{"op":"set","name":"f/2","data":{"n":22}}"#)
            #expect(again["seq"] == 3)
            #expect(again["version"] == 1)
            let count = try writer.ok(#"{"op":"increment","name":"f/count","path":"n"}"#)
            #expect(count["seq"] == 4)
            #expect(count["version"] == 2, "built on the committed version 1, not on the lost 2")
            #expect(count["value"] == 2)
            let pushes = [try watcher.push(), try watcher.push()]
            #expect(pushes.map { $0["seq"] } == [3, 4])
            #expect(pushes[0]["data"] == ["n": 22])
            try watcher.expectNothingPending()
            let reader = try hub.storeReader()
            #expect(try reader.changes(after: 0, limit: 100).map(\.seq) == [1, 2, 3, 4])
            #expect(try reader.record("f/5") == nil)
        }
        if kind == .sqlite {
            // Every acknowledged write is in the file; nothing refused is.
            try withHub(dataDirectory: directory.path) { hub in
                let client = try hub.connect()
                #expect(try client.ok(#"{"op":"get","name":"f/2"}"#)["data"] == ["n": 22])
                #expect(try client.ok(#"{"op":"get","name":"f/count"}"#)["data"] == ["n": 2])
                #expect(try client.request(#"{"op":"get","name":"f/6"}"#).errorCode == "not_found")
                let resumed = try client.ok(#"{"op":"subscribe","prefix":"f/","since":0}"#)
                #expect(resumed["changes"]?.arrayValue?.map { $0["seq"] } == [1, 2, 3, 4])
            }
        }
    }

    /// The key of a write that failed is not remembered: a retry after the
    /// disk has room applies, rather than replaying the failure or the lost
    /// reply; the workflow stats forget the lost order too.
    @Test func aFailedWritesKeyAndStatsAreForgotten() throws {
        let disk = DiskFault()
        try withFaultyHub(.memory, disk: disk) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"items/drill","data":{"stock":5}}"#)
            try client.ok(#"{"op":"set","name":"orders/1","data":{"item":"items/drill","qty":1}}"#)
            #expect(try client.ok(#"{"op":"get","name":"stats/orders"}"#)["data"]?["total"] == 1)

            disk.isFull = true
            let lost = try client.request(#"{"op":"set","name":"k","data":{"try":1},"idem":"key-1"}"#)
            #expect(lost.errorCode == "storage_failed")
            let order = try client.request(#"{"op":"set","name":"orders/2","data":{"item":"items/drill","qty":1}}"#)
            #expect(order.errorCode == "storage_failed")

            disk.isFull = false
            let retried = try client.ok(#"{"op":"set","name":"k","data":{"try":2},"idem":"key-1"}"#)
            #expect(retried["version"] == 1)
            #expect(try client.ok(#"{"op":"get","name":"k"}"#)["data"] == ["try": 2])
            try client.ok(#"{"op":"set","name":"orders/3","data":{"item":"items/drill","qty":1}}"#)
            let stats = try client.ok(#"{"op":"get","name":"stats/orders"}"#)
            #expect(stats["data"]?["total"] == 2, "orders/1 and orders/3: the lost orders/2 is not counted")
            #expect(try client.ok(#"{"op":"get","list":"orders"}"#)["entries"] == ["orders/1", "orders/3"])
        }
    }

    /// A lone write committed in place by its loop (the store writer idle)
    /// that fails is answered there too, and the next lone write commits.
    @Test func aFailedCommitInPlaceIsAnswered() throws {
        let disk = DiskFault()
        try withFaultyHub(.memory, disk: disk, lending: .whenParked) { hub in
            let writer = try #require(hub.hub.core.store as? MemoryStore).writerProbe
            disk.watch(hub.hub.server.group.loops)
            let client = try hub.connect()
            try waitUntil("the store writer to park", timeoutMillis: messageTimeout) { writer.wouldLend }
            try client.ok(#"{"op":"set","name":"a","data":{}}"#)
            disk.isFull = true
            for n in 0..<5 {
                try waitUntil("the store writer to park", timeoutMillis: messageTimeout) { writer.wouldLend }
                #expect(try client.request(#"{"op":"set","name":"b\#(n)","data":{}}"#).errorCode == "storage_failed")
            }
            #expect(disk.failedOnALoop > 0, "a loop borrowed the writer's connection and failed")
            disk.isFull = false
            try waitUntil("the store writer to park", timeoutMillis: messageTimeout) { writer.wouldLend }
            #expect(try client.ok(#"{"op":"set","name":"b","data":{}}"#)["seq"] == 2)
        }
    }
}

extension HubStorageFaultTests {
    /// A hello or a subscribe answered while a commit that then fails was
    /// on its way handed out a seq (or a snapshot) that is no longer true:
    /// it is answered `storage_failed` and the connection closed with 1013,
    /// so the client reconnects and resumes from what it really has. A plain
    /// read is answered `storage_failed` and its connection stays open.
    @Test func startingPointsOfARolledBackSeqCloseTheConnection() throws {
        let disk = DiskFault()
        // Never lent: the failing commit waits on the writer thread, not on a loop.
        let writerOnly = LendingRule(afterIdleNanos: .max, maxCommitNanos: 0)
        try withFaultyHub(.memory, disk: disk, lending: writerOnly) { hub in
            let writer = try hub.connect()
            let reader = try hub.connect()
            let subscriber = try hub.connect()
            let greeter = try hub.connect()
            try writer.ok(#"{"op":"set","name":"s/1","data":{"n":1}}"#)

            disk.isFull = true
            disk.hold()
            writer.send(#"{"op":"set","name":"s/1","data":{"n":2},"id":"w"}"#)
            try waitUntil("the commit to reach the disk", timeoutMillis: messageTimeout) { disk.isHoldingACommit }
            reader.send(#"{"op":"get","name":"s/1","id":"r"}"#)
            subscriber.send(#"{"op":"subscribe","name":"s/1","id":"s"}"#)
            greeter.send(#"{"op":"hello","protocol":1,"id":"h"}"#)
            let metrics = hub.hub.core.metrics
            try waitUntil("the answers to wait for the commit", timeoutMillis: messageTimeout) {
                metrics.heldOutputs.load(ordering: .relaxed) >= 4
            }
            disk.release()

            #expect(try writer.next().errorCode == "storage_failed")
            let read = try reader.next()
            #expect(read["id"] == "r" && read.errorCode == "storage_failed")
            for (client, id) in [(subscriber, "s"), (greeter, "h")] {
                let answer = try client.next()
                #expect(answer["id"] == .string(id) && answer.errorCode == "storage_failed", "\(answer.text)")
                do {
                    let next = try client.next()
                    Issue.record("expected the connection closed, got \(next.text)")
                } catch {
                    #expect("\(error)".hasPrefix("closed 1013"), "\(error)")
                }
            }
            try reader.expectNothingPending()

            disk.isFull = false
            let again = try hub.connect()
            let subscribed = try again.ok(#"{"op":"subscribe","name":"s/1"}"#)
            #expect(subscribed["record"]?["data"] == ["n": 1])
            try writer.ok(#"{"op":"set","name":"s/1","data":{"n":3}}"#)
            #expect(try again.push()["seq"] == 2)
        }
    }
}

extension HubStorageFaultTests {
    /// A full disk refuses every write: the log gets one line per 10 s
    /// saying how many went unlogged, not one per write, and a recovery
    /// line only after a logged failure.
    @Test func failuresAreLoggedAtMostEveryTenSeconds() {
        var faults = StorageFaults()
        #expect(faults.failed(at: 1_000) == 0, "the first is logged")
        for millis in stride(from: Int64(1_100), to: 11_000, by: 100) {
            #expect(faults.failed(at: millis) == nil)
        }
        #expect(faults.failed(at: 11_000) == 99, "then one line with the count of the others")
        #expect(faults.failing)
        #expect(faults.recovered() == 101)
        #expect(!faults.failing)
        // Flapping: a failure soon after the last line is not logged, nor is its recovery.
        #expect(faults.failed(at: 12_000) == nil)
        #expect(faults.recovered() == nil)
        #expect(faults.failed(at: 21_000) == 1)
    }
}

/// A hub on a store of `kind` whose commits fail while `disk.isFull`.
extension HubStorageFaultTests {
    /// A limited live query's members live in the core: a delivery that
    /// entered them and then failed to commit must leave them again, so the
    /// delivery that succeeds later enters the result (and pushes the old
    /// member out) instead of counting as a change to a member.
    @Test(arguments: StoreKind.allCases)
    func aLimitedQueryForgetsWhatAFailedCommitEntered(kind: StoreKind) throws {
        let disk = DiskFault()
        let directory = try TemporaryDirectory(prefix: "tally-faults")
        try withFaultyHub(kind, disk: disk, directory: directory) { hub in
            let writer = try hub.connect()
            try writer.ok(#"{"op":"set","name":"items/x","data":{"stock":100}}"#)
            for name in ["orders/a", "orders/c"] {
                try writer.ok(#"{"op":"set","name":"\#(name)","data":{"item":"items/x","qty":1}}"#)
                try writer.ok(#"{"op":"advance","name":"\#(name)","to":"in-progress"}"#)
                try writer.ok(#"{"op":"advance","name":"\#(name)","to":"ready"}"#)
            }
            try writer.ok(#"{"op":"advance","name":"orders/a","to":"delivered"}"#)
            let watcher = try hub.connect()
            let query = #"{"prefix":"orders/","where":{"stage":["delivered"]},"limit":1}"#
            let reply = try watcher.ok(#"{"op":"subscribe","query":\#(query)}"#)
            #expect(reply["records"]?.arrayValue?.first?["name"] == "orders/a")

            disk.isFull = true
            #expect(try writer.request(#"{"op":"advance","name":"orders/c","to":"delivered"}"#).errorCode == "storage_failed")
            disk.isFull = false
            try writer.ok(#"{"op":"advance","name":"orders/c","to":"delivered"}"#)
            let push = try watcher.push()
            #expect(push["op"] == "query")
            #expect(push["entered"]?.arrayValue?.first?["name"] == "orders/c", "\(push.text)")
            #expect(push["left"] == ["orders/a"], "\(push.text)")
        }
    }
}

private func withFaultyHub(_ kind: StoreKind, disk: DiskFault, directory: TemporaryDirectory? = nil,
                           lending: LendingRule? = nil, _ body: (HubFixture) throws -> Void) throws {
    var hooks = disk.hooks
    hooks.lending = lending
    let store: any Store
    let dataDirectory: String
    switch kind {
    case .memory:
        store = MemoryStore(retention: StoreRetention(), clock: .system, hooks: hooks)
        dataDirectory = ":memory:"
    case .sqlite:
        let directory = try directory ?? TemporaryDirectory(prefix: "tally-faults")
        dataDirectory = directory.path
        store = try SQLiteStore(directory: dataDirectory, durability: .full, retention: StoreRetention(),
                                clock: .system, hooks: hooks)
    }
    let fixture = try HubFixture(dataDirectory: dataDirectory, store: store)
    defer { fixture.close() }
    try body(fixture)
}

/// A disk that fills up and empties again: while `isFull`, every COMMIT
/// fails with SQLITE_FULL's code and words.
final class DiskFault: @unchecked Sendable {
    private let state = LockedValueBox((full: false, onLoop: 0, loops: [EventLoop](), holding: false, waiting: false))
    private let gate = DispatchSemaphore(value: 0)

    var isFull: Bool {
        get { state.withLock { $0.full } }
        set { state.withLock { $0.full = newValue } }
    }

    /// Failed commits tried on one of `loops` (a loop that borrowed the
    /// store writer's connection), not on the writer thread.
    var failedOnALoop: Int { state.withLock { $0.onLoop } }

    /// The hub's loops, for `failedOnALoop`.
    func watch(_ loops: [EventLoop]) { state.withLock { $0.loops = loops } }

    /// The next failing commit waits in the hook (the disk is slow to say
    /// no) until `release()`.
    func hold() { state.withLock { $0.holding = true } }

    /// Whether a commit is waiting in the hook.
    var isHoldingACommit: Bool { state.withLock { $0.waiting } }

    func release() {
        state.withLock { $0.holding = false }
        gate.signal()
    }

    var hooks: StoreTestHooks {
        StoreTestHooks(failCommit: { [state, gate] _ in
            let (full, hold) = state.withLock { s -> (Bool, Bool) in
                guard s.full else { return (false, false) }
                if s.loops.contains(where: \.inEventLoop) { s.onLoop += 1 }
                if s.holding { s.waiting = true }
                return (true, s.holding)
            }
            guard full else { return nil }
            if hold {
                gate.wait()
                state.withLock { $0.waiting = false }
            }
            return StoreError(code: 13, message: "database or disk is full", operation: "commit")  // SQLITE_FULL
        })
    }
}
