import Dispatch
import Testing
import TallyClient
import TallyConcurrency
import TallyHubTestSupport
import TallyProtocol
import TallyTestSupport

// Several hubs for one client (`TallyClient(urls:)`, `--server a,b`): it
// moves to the next when its hub cannot be reached or is lost, and
// resumes there by seq. Two independent hubs in this process stand for a
// cluster: they do not share seqs, so what is checked is the moving and
// that the resume carries `since` (the second hub, further along, answers
// it with the changes after it instead of a snapshot); the seqs' meaning
// across a cluster needs hubs on one PostgreSQL database.

/// Sets `count` records under `prefix` on the hub at `url`, one write each.
private func fill(_ url: String, _ prefix: String, count: Int) throws {
    let client = try BlockingTallyClient(access: HubAccess(server: url))
    defer { client.close() }
    for index in 0..<count {
        _ = try client.request(["op": "set", "name": .string("\(prefix)\(index)"), "data": ["n": .int(Int64(index))]])
    }
}

/// The URL of a stopped hub: connections to it are refused.
private func deadURL() throws -> String {
    let hub = try RestartableHub(dataDirectory: ":memory:")
    let url = hub.url
    hub.stop()
    return url
}

@Suite("TallyClient across hubs", .serialized)
struct TallyClientFailoverTests {
    @Test func aFirstHubThatRefusesGivesWayToTheNext() async throws {
        let live = try RestartableHub(dataDirectory: ":memory:")
        let dead = try deadURL()
        let states = Recorder<ConnectionState>()
        let client = try TallyClient(urls: [dead, live.url], clientName: "failover", options: testOptions {
            $0.backoff = Backoff(baseMillis: 20, capMillis: 200)
        })
        defer { client.close() }
        #expect(client.urls == [dead, live.url])
        client.onStateChange { state, _ in states.append(state) }
        client.connect()
        try await states.wait("live on the second hub") { $0.contains(.live) }
        #expect(client.url == live.url)
        #expect(states.all.contains { if case .reconnecting(attempt: 1, _) = $0 { true } else { false } })
        let written = try await client.set("items/a", data: ["qty": 1])
        #expect(written.version == 1)
    }

    @Test func aHubStoppedUnderTheClientIsLeftForTheNextAndEverySubscriptionResumesWithSince() async throws {
        let first = try RestartableHub.temporary(prefix: "failover-a")
        let second = try RestartableHub.temporary(prefix: "failover-b")
        try fill(first.url, "items/a", count: 1)       // seq 1 on the first hub
        try fill(second.url, "items/b", count: 3)      // seqs 1…3 on the second

        let states = Recorder<ConnectionState>()
        let events = Recorder<SubscriptionEvent>()
        let other = Recorder<SubscriptionEvent>()
        let client = try TallyClient(urls: [first.url, second.url], clientName: "failover", options: testOptions {
            $0.backoff = Backoff(baseMillis: 20, capMillis: 200)
        })
        defer { client.close() }
        client.onStateChange { state, _ in states.append(state) }
        let items = client.subscribe(.prefix("items/")) { events.append($0) }
        let record = client.subscribe(.record("items/b1")) { other.append($0) }
        client.connect()
        try await states.wait("live on the first hub") { $0.contains(.live) }
        #expect(client.url == first.url)
        guard case .snapshot(let snapshot)? = events.all.first else { throw TestFailure("no snapshot first") }
        #expect(snapshot.records.map(\.name) == ["items/a0"])
        #expect(client.cursor(of: items) == 1 && client.cursor(of: record) == 1)

        events.removeAll()
        other.removeAll()
        states.removeAll()
        first.stop()
        try await states.wait(timeoutMillis: 15_000, "live on the second hub") { $0.contains(.live) }
        #expect(client.url == second.url)
        // Resumed with since = 1: the second hub sends what it has after
        // seq 1 (its items/b1 and items/b2), not a snapshot.
        let received = events.all.flatMap { event -> [Change] in
            if case .changes(let changes, _) = event { return changes } else { return [] }
        }
        #expect(!events.all.contains { if case .snapshot = $0 { true } else { false } })
        #expect(received.map(\.seq) == [2, 3] && received.map(\.name) == ["items/b1", "items/b2"])
        #expect(other.all.contains { if case .changes(let changes, _) = $0 { changes.map(\.seq) == [2] } else { false } })
        #expect(client.cursor(of: items) == 3)

        // And live there.
        try fill(second.url, "items/c", count: 1)
        try await events.wait("a live push from the second hub") { events in
            events.contains { if case .changes(let changes, _) = $0 { changes.contains { $0.name == "items/c0" } } else { false } }
        }
    }

    @Test func aHubThatCannotReachItsDatabaseIsLeftForTheNext() async throws {
        // Answers hello with `unavailable` and keeps the connection open:
        // the client drops it and moves on rather than wait.
        let sick = try ScriptedHub { _ in
            .reply(["ok": false, "error": ["code": "unavailable", "message": "the hub cannot reach its database"]])
        }
        let live = try RestartableHub(dataDirectory: ":memory:")
        let states = Recorder<ConnectionState>()
        let reasons = Recorder<String>()
        let client = try TallyClient(urls: [sick.url, live.url], clientName: "failover", options: testOptions {
            $0.backoff = Backoff(baseMillis: 20, capMillis: 200)
        })
        defer { client.close() }
        client.onStateChange { state, reason in
            states.append(state)
            if let reason { reasons.append(reason) }
        }
        client.connect()
        try await states.wait("live on the second hub") { $0.contains(.live) }
        #expect(client.url == live.url)
        #expect(reasons.all.contains { $0.contains("unavailable") }, "\(reasons.all)")
        #expect(sick.received.all.first?["op"] == "hello")
    }

    @Test func oneURLWorksAsBeforeAndAnEmptyListIsRefused() throws {
        let client = try TallyClient(url: "http://127.0.0.1:1")
        #expect(client.urls == ["ws://127.0.0.1:1/v1/ws"] && client.url == "ws://127.0.0.1:1/v1/ws")
        #expect(throws: ProtocolError.self) { try TallyClient(urls: []) }
        #expect(throws: ProtocolError.self) { try TallyClient(urls: ["ws://127.0.0.1:1", "nonsense"]) }
    }
}

@Suite("One-shot calls across hubs", .serialized)
struct OneShotFailoverTests {
    @Test func aRequestGoesToTheFirstHubThatCanBeReached() throws {
        let live = try RestartableHub(dataDirectory: ":memory:")
        let dead = try deadURL()
        let access = HubAccess(servers: [dead, live.url])
        let written = try BlockingTallyClient.write(access, .set("items/a", data: ["qty": 1]))
        #expect(written["version"] == .int(1))
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        #expect(client.url == live.url && client.hubIndex == 1)
        #expect(client.passedOver.count == 1)
        // REST too.
        let health = try RESTClient(access: access).get("/healthz")
        #expect(health.status == 200)
    }

    @Test func whenNoHubAnswersEveryOneIsNamed() throws {
        let (one, two) = (try deadURL(), try deadURL())
        do {
            _ = try BlockingTallyClient.ask(HubAccess(servers: [one, two]), ["op": "get", "name": "items/a"])
            Issue.record("a stopped hub answered")
        } catch {
            guard case .noneReachable(let attempts) = error else { Issue.record("\(error)"); return }
            #expect(attempts.count == 2)
            #expect(error.description.contains(one) && error.description.contains(two), "\(error)")
        }
        do {
            _ = try RESTClient(access: HubAccess(servers: [one, two])).get("/healthz")
            Issue.record("a stopped hub answered over REST")
        } catch {
            let text = error.description
            #expect(text.contains("127.0.0.1:\(port(one))") && text.contains("127.0.0.1:\(port(two))"), "\(text)")
        }
    }

    @Test func aLostReadOrKeyedWriteMovesOnAndAnUnkeyedWriteDoesNot() throws {
        // Takes the connection, then drops it with the request unanswered.
        let dropper = try ScriptedHub { _ in .close }
        let live = try RestartableHub(dataDirectory: ":memory:")
        let access = HubAccess(servers: [dropper.url, live.url])

        let unkeyed = WriteOperation.set("items/a", data: ["qty": 1])
        do {
            _ = try BlockingTallyClient.write(access, unkeyed)
            Issue.record("a write without a key went to a second hub")
        } catch {
            guard case .disconnected(let reason) = error else { Issue.record("\(error)"); return }
            #expect(reason.contains("not sent to another hub") && reason.contains(dropper.url), "\(reason)")
        }
        #expect(dropper.received.all.count == 1)
        #expect(throws: HubError.self) { try BlockingTallyClient.ask(HubAccess(server: live.url), ["op": "get", "name": "items/a"]) }

        let keyed = try BlockingTallyClient.write(access, unkeyed, idem: "failover-key-1")
        #expect(keyed["version"] == .int(1))
        #expect(dropper.received.all.last?["idem"] == "failover-key-1")
        let read = try BlockingTallyClient.ask(access, ["op": "get", "name": "items/a"])
        #expect(read["data"] == ["qty": 1])
        #expect(dropper.received.all.count == 3)
    }

    @Test func theFollowerMovesToTheNextHubAndResumesWithSince() throws {
        let first = try RestartableHub.temporary(prefix: "follower-a")
        let second = try RestartableHub.temporary(prefix: "follower-b")
        try fill(second.url, "items/b", count: 3)
        var follower = BlockingFollower(access: HubAccess(servers: [first.url, second.url]),
                                        subscribe: ["op": "subscribe", "prefix": "items/"], since: nil)
        var seen: [(name: String, seq: Int64)] = []
        var snapshots = 0
        var movedTo: String?
        var failure: (any Error)?
        try follower.run { event in
            do {
                switch event {
                case .snapshot:
                    snapshots += 1
                    try fill(first.url, "items/a", count: 1)
                case .change(let change):
                    seen.append((change["name"]?.stringValue ?? "?", change["seq"]?.int64 ?? -1))
                    if seen.count == 1 { first.stop() }
                    return seen.count < 3
                case .reconnected(let url):
                    movedTo = url
                case .lost, .resnapshot:
                    break
                }
                return true
            } catch {
                failure = error
                return false
            }
        }
        #expect(failure == nil, "\(String(describing: failure))")
        #expect(snapshots == 1)
        #expect(movedTo == second.url)
        // items/a0 (seq 1 on the first hub), then the second hub's changes after seq 1.
        #expect(seen.map(\.name) == ["items/a0", "items/b1", "items/b2"] && seen.map(\.seq) == [1, 2, 3])
        #expect(follower.since == 3)
    }
}

/// The port of a ws://127.0.0.1:PORT/… URL.
private func port(_ url: String) -> String {
    String(url.dropFirst("ws://127.0.0.1:".count).prefix { $0 != "/" })
}
