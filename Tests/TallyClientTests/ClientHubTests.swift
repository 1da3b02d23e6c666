import Testing
import TallyClient
import TallyHubTestSupport
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

/// The client against a real hub in this process.
@Suite(.serialized) struct ClientHubTests {
    @Test func typedRequestsAndRefusals() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url)
        defer { client.close() }

        let created = try await client.set("items/a", data: ["qty": 1, "name": "bolt"], idem: "k1")
        #expect(created.version == 1 && created.name == "items/a")
        // The same idempotency key answers the first result and applies nothing.
        let again = try await client.set("items/a", data: ["qty": 99], idem: "k1")
        #expect(again.seq == created.seq)
        let record = try await client.get("items/a")
        #expect(record.data == ["qty": 1, "name": "bolt"] && record.version == 1)

        let bumped = try await client.increment("items/a", path: "qty", by: JSONNumber(2))
        #expect(bumped.value == .int(3) && bumped.version == 2)
        _ = try await client.merge("items/a", patch: ["name": .null, "color": "red"], version: 2)
        #expect(try await client.get("items/a", path: "color") == "red")

        // A stale base version is refused with the current version and data.
        do {
            _ = try await client.set("items/a", path: "qty", value: 7, version: 1)
            Issue.record("a stale version was accepted")
        } catch {
            #expect(error.code == .conflict)
            #expect(error.details["version"] == .int(3))
            #expect(error.details["data"]?.objectValue?["color"] == "red")
        }
        do {
            _ = try await client.get("items/none")
            Issue.record("a missing record was found")
        } catch {
            #expect(error.code == .notFound)
        }

        _ = try await client.addEntry("shelf", entry: "items/a")
        _ = try await client.addEntry("shelf", entry: "items/b", at: 0)
        #expect(try await client.getList("shelf").entries == ["items/b", "items/a"])

        let atomic = try await client.write(atomic: [.set("items/c", data: ["qty": 5]), .removeEntry("shelf", entry: "items/b")])
        #expect(atomic.results.count == 2 && atomic.results[1].isList)
        let page = try await client.getPrefix("items/", limit: 2)
        #expect(page.records.map(\.name) == ["items/a", "items/c"] && !page.more)
    }

    @Test func reconnectsWithBackoffAfterARestartAndResumesExactlyTheMissedChanges() async throws {
        let directory = try TemporaryDirectory(prefix: "client-resume")
        let hub = try RestartableHub(dataDirectory: directory.path)
        let writer = try await liveClient(hub.url)
        for i in 0..<3 { _ = try await writer.set("items/\(i)", data: ["n": .int(Int64(i))]) }
        writer.close()

        let states = Recorder<ConnectionState>()
        let events = Recorder<SubscriptionEvent>()
        let client = try TallyClient(url: hub.url, clientName: "resume", options: testOptions {
            $0.backoff = Backoff(baseMillis: 20, capMillis: 200)
            $0.honourRetryAfter = true
        })
        defer { client.close() }
        client.onStateChange { state, _ in states.append(state) }
        let subscription = client.subscribe(.prefix("items/")) { events.append($0) }
        client.connect()
        try await states.wait("live") { $0.contains(.live) }
        guard case .snapshot(let snapshot) = events.all.first else { throw TestFailure("no snapshot first") }
        #expect(snapshot.records.map(\.name) == ["items/0", "items/1", "items/2"])
        let cursor = try #require(client.cursor(of: subscription))

        states.removeAll()
        hub.stop()
        // Attempts keep failing while the hub is away, each after a jittered delay under its ceiling.
        let attempts = try await states.wait("three failed attempts") { states in
            states.filter { if case .reconnecting = $0 { true } else { false } }.count >= 3
        }
        let backoff = Backoff(baseMillis: 20, capMillis: 200)
        for case .reconnecting(let attempt, let delay) in attempts {
            #expect(delay >= 0 && delay <= backoff.ceiling(attempt: attempt))
        }
        let numbers = attempts.compactMap { if case .reconnecting(let attempt, _) = $0 { attempt } else { nil } }
        #expect(numbers == Array(1...numbers.count))

        // Changes the client cannot see: made on the same data on another port.
        var missed: [Int64] = []
        try await hub.offside { url in
            let other = try await liveClient(url)
            defer { other.close() }
            missed.append(try await other.set("items/1", path: "n", value: 10).seq)
            _ = try await other.set("elsewhere/x", data: ["ignored": true])
            missed.append(try await other.delete("items/2").seq)
            missed.append(try await other.set("items/3", data: ["n": 3]).seq)
        }
        events.removeAll()
        states.removeAll()
        try hub.start()
        try await states.wait(timeoutMillis: 15_000, "live again") { $0.contains(.live) }

        // Exactly the missed changes under the prefix, in order, once; no snapshot.
        let received = events.all.flatMap { event -> [Change] in
            if case .changes(let changes, _) = event { return changes } else { return [] }
        }
        #expect(!events.all.contains { if case .snapshot = $0 { true } else { false } })
        #expect(received.map(\.seq) == missed)
        #expect(received.map(\.kind) == [.setPath, .delete, .set])
        #expect(missed.allSatisfy { $0 > cursor })
        #expect(client.cursor(of: subscription) ?? 0 >= missed.last!)

        // And it is live: new changes keep arriving.
        let live = try await liveClient(hub.url)
        defer { live.close() }
        let next = try await live.set("items/4", data: [:]).seq
        try await events.wait("the live push") { events in
            events.contains { if case .changes(let changes, _) = $0 { changes.contains { $0.seq == next } } else { false } }
        }
    }

    @Test func aResumeTheHubCannotServeBecomesAResnapshotAndObservationsDiffIt() async throws {
        let directory = try TemporaryDirectory(prefix: "client-resnapshot")
        let hub = try RestartableHub(dataDirectory: directory.path) { $0.core.maxReplayChanges = 2 }
        let writer = try await liveClient(hub.url)
        _ = try await writer.set("orders-x/1", data: ["qty": 1, "note": "a"])
        _ = try await writer.set("orders-x/2", data: ["qty": 2])
        writer.close()

        let updates = Recorder<ObservationUpdate>()
        let events = Recorder<SubscriptionEvent>()
        let client = try await liveClient(hub.url, options: testOptions { $0.backoff = Backoff(baseMillis: 20, capMillis: 100) })
        defer { client.close() }
        _ = client.observe(prefix: "orders-x/") { updates.append($0) }
        _ = client.subscribe(.prefix("orders-x/")) { events.append($0) }
        try await updates.wait("the initial state") { !$0.isEmpty }
        #expect(updates.all[0].isInitial && updates.all[0].changes.inserted == ["orders-x/1", "orders-x/2"])
        // The subscription resumes from its snapshot's seq: without one yet
        // it would subscribe afresh after the restart (no resnapshot).
        try await events.wait("the first snapshot") { $0.contains { if case .snapshot = $0 { true } else { false } } }

        hub.stop()
        try await hub.offside { url in
            let other = try await liveClient(url)
            defer { other.close() }
            _ = try await other.set("orders-x/1", path: "qty", value: 5)
            _ = try await other.delete("orders-x/2")
            _ = try await other.set("orders-x/3", data: ["qty": 3])
        }
        updates.removeAll()
        events.removeAll()
        try hub.start()
        let after = try await updates.wait("the resnapshot's changes") { !$0.isEmpty }
        #expect(after[0].changes == ChangeSet(inserted: ["orders-x/3"], deleted: ["orders-x/2"], modified: ["orders-x/1": ["qty"]]))
        #expect(after[0].records["orders-x/1"]?.data == ["qty": 5, "note": "a"])
        let snapshots = try await events.wait("the resnapshot") { $0.contains { if case .snapshot = $0 { true } else { false } } }
        guard case .snapshot(let snapshot)? = snapshots.first(where: { if case .snapshot = $0 { true } else { false } }) else { return }
        #expect(snapshot.resnapshot)
    }

    @Test func observationReportsFineGrainedChangeSets() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url)
        defer { client.close() }
        _ = try await client.set("shelf/a", data: ["qty": 1, "name": "bolt"])
        let updates = Recorder<ObservationUpdate>()
        let single = Recorder<ObservationUpdate>()
        _ = client.observe(prefix: "shelf/") { updates.append($0) }
        _ = client.observe(record: "shelf/b") { single.append($0) }
        try await updates.wait("initial") { $0.count == 1 }
        try await single.wait("initial") { $0.count == 1 }
        #expect(updates.all[0].changes.inserted == ["shelf/a"])
        #expect(single.all[0].isInitial && single.all[0].records.isEmpty)

        func next(_ count: Int) async throws -> ChangeSet {
            try await updates.wait("update \(count)") { $0.count >= count }[count - 1].changes
        }
        _ = try await client.set("shelf/b", data: ["qty": 2])
        #expect(try await next(2) == ChangeSet(inserted: ["shelf/b"]))
        _ = try await client.set("shelf/a", path: "qty", value: 5)
        #expect(try await next(3) == ChangeSet(modified: ["shelf/a": ["qty"]]))
        _ = try await client.merge("shelf/a", patch: ["name": .null, "color": "red"])
        #expect(try await next(4) == ChangeSet(modified: ["shelf/a": ["name", "color"]]))
        _ = try await client.delete("shelf/b")
        #expect(try await next(5) == ChangeSet(deleted: ["shelf/b"]))
        #expect(updates.all[4].records.keys.sorted() == ["shelf/a"])

        let record = try await single.wait("the record's own updates") { $0.count >= 3 }
        #expect(record[1].changes.inserted == ["shelf/b"] && record[2].changes.deleted == ["shelf/b"])
    }

    @Test func tokensAreSentInTheHelloAndABadOneNeverGoesLive() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:") { configuration in
            configuration.core.authenticator = Authenticator(users: [
                HubUser(name: "ana", role: "staff", tokenHash: Authenticator.sha256(Array("s3cret-token".utf8))),
            ])
        }
        let good = try await liveClient(hub.url, token: "s3cret-token")
        defer { good.close() }
        #expect(good.hello?["user"] == "ana" && good.hello?["role"] == "staff")
        _ = try await good.set("items/t", data: ["ok": true])

        let reasons = Recorder<String>()
        let states = Recorder<ConnectionState>()
        let bad = try TallyClient(url: hub.url, token: "wrong", options: testOptions {
            $0.backoff = Backoff(baseMillis: 20, capMillis: 50)
            $0.waitForConnectionMillis = 300
        })
        defer { bad.close() }
        bad.onStateChange { state, reason in
            states.append(state)
            if let reason { reasons.append(reason) }
        }
        bad.connect()
        try await reasons.wait("a refusal") { $0.contains { $0.contains("token") } }
        #expect(!states.all.contains(.live))
        // Requests wait for a live connection and fail when none comes.
        do {
            _ = try await bad.get("items/t")
            Issue.record("a request went through without a valid token")
        } catch {
            #expect(error.code == .timeout)
        }
    }

    @Test func aHandlerThatThrowsGetsTheSameChangesAgainAfterTheReconnect() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url, options: testOptions { $0.backoff = Backoff(baseMillis: 10, capMillis: 20) })
        defer { client.close() }
        let seen = Recorder<Int64>()
        let failures = Recorder<Int>()
        _ = client.subscribe(.prefix("flaky/")) { event in
            guard case .changes(let changes, _) = event else { return }
            if failures.all.isEmpty {
                failures.append(1)
                struct Full: Error {}
                throw Full()
            }
            for change in changes { seen.append(change.seq) }
        }
        let writer = try await liveClient(hub.url)
        defer { writer.close() }
        let first = try await writer.set("flaky/1", data: [:]).seq
        let second = try await writer.set("flaky/2", data: [:]).seq
        let got = try await seen.wait("redelivery") { $0.contains(second) }
        #expect(got.first == first && got.filter { $0 == first }.count == 1)
    }

    @Test func aLargePrefixSnapshotIsPagedIntoOne() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url)
        defer { client.close() }
        for batch in 0..<11 {
            let ops = (0..<1000).map { i in WriteOperation.set("bulk/\(batch)-\(1000 + i)", data: ["i": .int(Int64(i))]) }
            _ = try await client.write(atomic: ops)
        }
        let events = Recorder<SubscriptionEvent>()
        _ = client.subscribe(.prefix("bulk/")) { events.append($0) }
        let all = try await events.wait(timeoutMillis: 20_000, "the snapshot") { !$0.isEmpty }
        guard case .snapshot(let snapshot) = all[0] else { throw TestFailure("expected a snapshot") }
        #expect(snapshot.records.count == 11_000)
        #expect(Set(snapshot.records.map(\.name)).count == 11_000)
    }

    /// A list longer than a page: the subscription pages it in before its
    /// snapshot, applying the pushes that arrive meanwhile to the part
    /// already loaded; snapshot plus changes equal the list.
    @Test func aLongListIsPagedIntoOneSnapshotWithTheChangesMadeMeanwhile() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url)
        let writer = try await liveClient(hub.url)
        defer { client.close(); writer.close() }
        for batch in 0..<25 {
            _ = try await client.write(atomic: (0..<1000).map { .addEntry("long", entry: "e/\(batch * 1000 + $0)") })
        }
        let page = try await client.getListPage("long", limit: 2)
        #expect(page.list.entries == ["e/0", "e/1"] && page.cursor != nil)
        let events = Recorder<SubscriptionEvent>()
        _ = client.subscribe(.list("long")) { events.append($0) }
        async let early = writer.addEntry("long", entry: "early", at: 3)
        async let middle = writer.removeEntry("long", entry: "e/12000")
        async let late = writer.addEntry("long", entry: "late")
        let last = try await [early.seq, middle.seq, late.seq].max()!
        let all = try await events.wait(timeoutMillis: 20_000, "the snapshot and every change") { events in
            var seen: Int64 = 0
            for event in events {
                if case .snapshot(let snapshot) = event { seen = max(seen, snapshot.seq) }
                if case .changes(_, let through) = event { seen = max(seen, through) }
            }
            return seen >= last
        }
        guard case .snapshot(let snapshot) = all[0] else { throw TestFailure("expected a snapshot") }
        var entries = snapshot.list?.entries
        for case .changes(let changes, _) in all.dropFirst() {
            for change in changes where change.seq > snapshot.seq { entries = try change.applied(toEntries: entries) }
        }
        let whole = try await client.getList("long")
        #expect(whole.entries.count == 25_001)
        #expect(entries == whole.entries)
    }

    /// The page's last entry removed and another added in its place while
    /// the list is paged in (sent on the same connection right behind the
    /// subscribe, so the hub answers them between the first page and the
    /// second): the new entry's key is below the first page's cursor, so
    /// the second page does not have it, and the paging starts again.
    @Test func aLongListPagedInStaysExactWhenThePagesLastEntryIsReplaced() async throws {
        let hub = try RestartableHub(dataDirectory: ":memory:")
        let client = try await liveClient(hub.url)
        defer { client.close() }
        for batch in 0..<12 {
            _ = try await client.write(atomic: (0..<1000).map { .addEntry("long", entry: "e/\(batch * 1000 + $0)") })
        }
        let events = Recorder<SubscriptionEvent>()
        _ = client.subscribe(.list("long")) { events.append($0) }
        async let removed = client.removeEntry("long", entry: "e/9999")
        async let added = client.addEntry("long", entry: "boundary", at: 9999)
        let last = try await max(removed.seq, added.seq)
        let all = try await events.wait(timeoutMillis: 20_000, "the snapshot and both changes") { events in
            events.contains { event in
                switch event {
                case .snapshot(let snapshot): snapshot.seq >= last
                case .changes(_, let through): through >= last
                default: false
                }
            }
        }
        guard case .snapshot(let snapshot) = all[0] else { throw TestFailure("expected a snapshot") }
        var entries = snapshot.list?.entries
        for case .changes(let changes, _) in all.dropFirst() {
            for change in changes where change.seq > snapshot.seq { entries = try change.applied(toEntries: entries) }
        }
        var expected = (0..<12_000).filter { $0 != 9999 }.map { "e/\($0)" }
        expected.insert("boundary", at: 9999)
        #expect(entries?.count == 12_000)
        #expect(entries.map { $0.count > 9999 ? $0[9999] : "" } == "boundary")
        #expect((entries ?? []).elementsEqual(expected), "every entry in order")
    }
}
