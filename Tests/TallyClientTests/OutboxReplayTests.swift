import Testing
import TallyClient
import TallyHubTestSupport
import TallyProtocol

/// A queued write for the tests: a record it writes and its idempotency key.
struct QueuedWrite: OutboxReplayable, Equatable {
    var replayID: Int64
    var replayLane: String
    var attempts = 0

    init(_ id: Int64, _ lane: String) {
        replayID = id
        replayLane = lane
    }

    var key: String { "test-\(replayID)" }

    /// The write as it goes out: the same message, key included, every time.
    var message: JSONObject {
        ["op": "increment", "name": .string(replayLane), "path": "count", "by": 1, "idem": .string(key)]
    }
}

@Suite("OutboxReplay")
struct OutboxReplayTests {
    func ids(_ entries: [QueuedWrite]) -> [Int64] { entries.map(\.replayID) }

    @Test func outboxOrderOnePerLaneWithinTheWindow() {
        var replay = OutboxReplay<QueuedWrite>(window: 3)
        replay.enqueue([QueuedWrite(1, "a"), QueuedWrite(2, "a"), QueuedWrite(3, "b"), QueuedWrite(4, "c"),
                        QueuedWrite(5, "d")])
        #expect(replay.newestID == 5)
        // a's second write waits for its first; the window holds three.
        #expect(ids(replay.takeSendable()) == [1, 3, 4])
        #expect(replay.takeSendable().isEmpty)
        replay.settle(1)
        #expect(ids(replay.takeSendable()) == [2])
        replay.settle(3)
        #expect(ids(replay.takeSendable()) == [5])
        #expect(replay.queued.isEmpty && replay.inflight.count == 3)
    }

    @Test func resumeAfterAFailure() throws {
        var replay = OutboxReplay<QueuedWrite>(window: 1)
        replay.enqueue([QueuedWrite(1, "a"), QueuedWrite(2, "b"), QueuedWrite(3, "c")])
        #expect(ids(replay.takeSendable()) == [1])
        replay.settle(1)
        // The second fails in a way that says nothing about the write: it
        // goes back to its place and is the next to go, not the third.
        var second = try #require(replay.takeSendable().first)
        #expect(ReplayFailure(code: .storageFailed) == .keep)
        second.attempts += 1
        replay.putBack(second)
        #expect(ids(replay.queued) == [2, 3])
        let again = replay.takeSendable()
        #expect(ids(again) == [2] && again.first?.attempts == 1)
        replay.settle(2)
        #expect(ids(replay.takeSendable()) == [3])
    }

    @Test func aLostConnectionRequeuesInFlightAndMakesRepliesStale() {
        var replay = OutboxReplay<QueuedWrite>(window: 8)
        replay.enqueue([QueuedWrite(1, "a"), QueuedWrite(2, "a"), QueuedWrite(3, "b")])
        let sent = replay.takeSendable()
        let epoch = replay.epoch
        #expect(ids(sent) == [1, 3])
        replay.restart()
        #expect(replay.inflight.isEmpty && ids(replay.queued) == [1, 2, 3])
        // The reply to the first send arrives after the restart: stale.
        #expect(replay.inflight(1, epoch: epoch) == nil)
        #expect(ids(replay.takeSendable()) == [1, 3])
        #expect(replay.inflight(1, epoch: replay.epoch) != nil)
    }

    @Test func aKeyReplayedTwiceIsAnsweredOnce() throws {
        var replay = OutboxReplay<QueuedWrite>(window: 4)
        replay.enqueue([QueuedWrite(7, "a")])
        _ = replay.takeSendable()
        let first = replay.epoch
        replay.restart()
        let second = try #require(replay.takeSendable().first)
        #expect(second.key == "test-7")
        // Both sends' replies come back: only the current one settles the
        // entry, and a duplicate of it finds nothing left to settle.
        #expect(replay.inflight(7, epoch: first) == nil)
        #expect(replay.inflight(7, epoch: replay.epoch) != nil)
        #expect(replay.settle(7) != nil)
        #expect(replay.settle(7) == nil)
        #expect(replay.inflight(7, epoch: replay.epoch) == nil)
        #expect(replay.queued.isEmpty && replay.inflight.isEmpty)
    }

    @Test func resendKeepsTheLaneAndPutBackKeepsOutboxOrder() throws {
        var replay = OutboxReplay<QueuedWrite>(window: 4)
        replay.enqueue([QueuedWrite(1, "a"), QueuedWrite(2, "a"), QueuedWrite(3, "b")])
        #expect(ids(replay.takeSendable()) == [1, 3])
        // The next step of entry 1 goes out at once and a still waits.
        var entry = try #require(replay.inflight[1])
        entry.attempts = 5
        replay.resend(entry)
        #expect(replay.inflight[1]?.attempts == 5)
        #expect(replay.takeSendable().isEmpty)
        // Put back, it goes before the later write of its lane.
        replay.putBack(entry)
        #expect(ids(replay.queued) == [1, 2])
        replay.updateQueued { $0.attempts += 1 }
        #expect(replay.queued.map(\.attempts) == [6, 1])
        #expect(ids(replay.takeSendable()) == [1])
    }

    @Test func whatAFailureMeans() {
        for code in [ErrorCode.disconnected, .timeout, .shuttingDown, .storageFailed, .unauthorized, .badReply,
                     ErrorCode(rawValue: "too_many_requests")] {
            #expect(ReplayFailure(code: code) == .keep, "\(code)")
        }
        for code in [ErrorCode.conflict, .forbidden, .notFound, .illegalTransition, .badField, .clientClosed] {
            #expect(ReplayFailure(code: code) == .setAside, "\(code)")
        }
        #expect(ReplayFailure(code: ErrorCode(rawValue: "http_503"), httpStatus: 503) == .keep)
        #expect(ReplayFailure(code: ErrorCode(rawValue: "http_429"), httpStatus: 429) == .keep)
        #expect(ReplayFailure(code: ErrorCode(rawValue: "http_408"), httpStatus: 408) == .keep)
        #expect(ReplayFailure(code: .badField, httpStatus: 400) == .setAside)
        #expect(ReplayFailure(HubError.timeout) == .keep)
        #expect(ReplayFailure(HubError.disconnected("gone")) == .keep)
        #expect(ReplayFailure(HubError.unreachable(url: "ws://x", reason: "refused")) == .keep)
        #expect(ReplayFailure(HubError.refused(["code": "conflict"])) == .setAside)
        #expect(ReplayFailure(HubError.refused(["code": "storage_failed"])) == .keep)
        #expect(ReplayFailure(ProtocolError(.shuttingDown, "bye")) == .keep)
    }

    @Test func unavailableIsRetryable() {
        // The hub cannot reach its database: the write was not acknowledged.
        #expect(ErrorCode.unavailable.rawValue == "unavailable")
        #expect(ReplayFailure(code: .unavailable) == .keep)
        #expect(ReplayFailure(HubError.refused(["code": "unavailable", "message": "database unreachable"])) == .keep)
        let error = ProtocolError(.unavailable, "the hub cannot reach its database")
        #expect(ReplayFailure(error) == .keep)
        #expect(error.isTransient && error.isHubRetryable)
        #expect(!ProtocolError(.conflict, "moved on").isHubRetryable)
    }
}

/// The replay loop driven against a hub in this process, as the intake
/// runner drives it (one at a time, on this thread).
@Suite("OutboxReplay against a hub", .serialized)
struct OutboxReplayHubTests {
    /// Sends what may go, one request at a time; a failure the replay keeps
    /// stops the run (the rest waits for the next one), one it sets aside
    /// drops the entry. Returns the replies by entry.
    @discardableResult
    func run(_ replay: inout OutboxReplay<QueuedWrite>, _ client: BlockingTallyClient,
             loseReplyOf lost: Int64? = nil) -> [Int64: JSONObject] {
        var replies: [Int64: JSONObject] = [:]
        while let entry = replay.takeSendable().first {
            do {
                let reply = try client.request(entry.message)
                if entry.replayID == lost {
                    // Applied by the hub, but the answer never reached the outbox.
                    replay.restart()
                    return replies
                }
                replies[entry.replayID] = reply
                replay.settle(entry.replayID)
            } catch {
                switch ReplayFailure(error) {
                case .keep:
                    replay.putBack(entry)
                    return replies
                case .setAside:
                    replay.settle(entry.replayID)
                }
            }
        }
        return replies
    }

    @Test func aReplayedKeyIsAppliedOnceAndTheRunResumesWhereItStopped() throws {
        let hub = try RestartableHub.temporary(prefix: "replay-hub")
        let client = try BlockingTallyClient(access: HubAccess(server: hub.url))
        defer { client.close() }
        var replay = OutboxReplay<QueuedWrite>(window: 1)
        replay.enqueue([QueuedWrite(1, "counters/a"), QueuedWrite(2, "counters/a"), QueuedWrite(3, "counters/b")])

        // The first write's reply is lost: the run stops with it in line.
        run(&replay, client, loseReplyOf: 1)
        #expect(replay.queued.map(\.replayID) == [1, 2, 3])
        let resumed = run(&replay, client)
        #expect(replay.queued.isEmpty && replay.inflight.isEmpty)

        // Sent twice, applied once: the hub answered the second send with
        // the first's result, and the count moved by one per entry.
        #expect(resumed[1]?["value"] == .int(1))
        #expect(resumed[2]?["value"] == .int(2))
        let a = try client.request(["op": "get", "name": "counters/a"])
        #expect(a["data"]?["count"] == .int(2) && a["version"] == .int(2))
        let b = try client.request(["op": "get", "name": "counters/b"])
        #expect(b["data"]?["count"] == .int(1))
    }

    @Test func aStoppedHubStopsTheRunAndARefusalIsSetAside() throws {
        let hub = try RestartableHub.temporary(prefix: "replay-hub")
        var replay = OutboxReplay<QueuedWrite>(window: 1)
        replay.enqueue([QueuedWrite(1, "counters/c"), QueuedWrite(2, "stats/forbidden"), QueuedWrite(3, "counters/c")])
        do {
            let client = try BlockingTallyClient(access: HubAccess(server: hub.url))
            let replies = run(&replay, client)
            client.close()
            // stats/ records are the hub's own: refused for good, set aside,
            // and the run goes on.
            #expect(replies[1] != nil && replies[2] == nil && replies[3] != nil)
        }
        #expect(replay.queued.isEmpty && replay.inflight.isEmpty)

        replay.enqueue([QueuedWrite(4, "counters/c"), QueuedWrite(5, "counters/c")])
        let client = try BlockingTallyClient(access: HubAccess(server: hub.url))
        _ = replay.takeSendable()
        hub.stop()
        // The connection is gone: kept, and the run stops with both in line.
        replay.restart()
        run(&replay, client)
        client.close()
        #expect(replay.queued.map(\.replayID) == [4, 5])
        try hub.start()
        let again = try BlockingTallyClient(access: HubAccess(server: hub.url))
        defer { again.close() }
        run(&replay, again)
        #expect(replay.queued.isEmpty)
        let c = try again.request(["op": "get", "name": "counters/c"])
        #expect(c["data"]?["count"] == .int(4))
    }
}
