@preconcurrency import Glibc
import Testing
import TallyNet
import TallyPostgres
import TallyProtocol
@testable import TallyServer
import TallyStore
import TallyTestSupport

// Two hubs on one PostgreSQL database (HubCore+SharedStore.swift): each
// accepts writes, numbers them after the last change it knows of, and
// catches up on the other's commits. Checked against what one hub would
// answer: one global order of seqs, versions as a single hub leaves them,
// one winner per race, idempotency keys answered once.

/// Two hubs sharing a fresh database of the test process's server.
final class HubPair {
    let a: HubFixture
    let b: HubFixture

    init(_ adjust: @escaping (inout HubConfiguration) -> Void = { _ in }) throws {
        let url = try PostgresCluster.shared().createDatabase("pair")
        a = try HubFixture(store: try PostgresStore(url: url), adjust)
        do {
            b = try HubFixture(store: try PostgresStore(url: url), adjust)
        } catch {
            a.close()
            throw error
        }
    }

    func close() {
        a.close()
        b.close()
    }
}

func withHubPair<R>(_ adjust: @escaping (inout HubConfiguration) -> Void = { _ in },
                    _ body: (HubPair) throws -> R) throws -> R {
    let pair = try HubPair(adjust)
    defer { pair.close() }
    return try body(pair)
}

@Suite("Hubs sharing one PostgreSQL store", .serialized)
struct SharedStoreHubTests {
    @Test func aChangeOnOneHubReachesASubscriberOnTheOther() throws {
        try withHubPair { pair in
            let watcher = try pair.b.connect()
            try watcher.ok(#"{"op":"subscribe","name":"jobs/1"}"#)
            let writer = try pair.a.connect()
            let reply = try writer.ok(#"{"op":"set","name":"jobs/1","data":{"stage":"new"}}"#)
            let push = try watcher.push()
            #expect(push["seq"] == reply["seq"])
            #expect(push["data"] == ["stage": "new"])
            // The other hub reads the record as the first wrote it.
            let got = try watcher.ok(#"{"op":"get","name":"jobs/1"}"#)
            #expect(got["version"] == 1)
            #expect(got["data"] == ["stage": "new"])
            try watcher.expectNothingPending()
        }
    }

    @Test func writesAlternatingBetweenHubsGetOneSequenceAndOneVersionLine() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            let onB = try pair.b.connect()
            let watchA = try pair.a.connect()
            let watchB = try pair.b.connect()
            try watchA.ok(#"{"op":"subscribe","prefix":"n/"}"#)
            try watchB.ok(#"{"op":"subscribe","prefix":"n/"}"#)
            var seqs: [JSONValue?] = []
            for round in 1...10 {
                let client = round % 2 == 0 ? onA : onB
                let reply = try client.ok(#"{"op":"increment","name":"n/counter","path":"n"}"#)
                #expect(reply["version"] == .number(JSONNumber(Int64(round))), "round \(round): \(reply.text)")
                #expect(reply["value"] == .number(JSONNumber(Int64(round))))
                seqs.append(reply["seq"])
            }
            #expect(seqs == (1...10).map { .number(JSONNumber(Int64($0))) })
            // Every subscriber on either hub sees every change once, in order.
            for watcher in [watchA, watchB] {
                var seen: [JSONValue?] = []
                for _ in 1...10 { seen.append(try watcher.push()["seq"]) }
                #expect(seen == seqs)
                try watcher.expectNothingPending()
            }
        }
    }

    @Test func aVersionRaceBetweenHubsHasOneWinner() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            let onB = try pair.b.connect()
            try onA.ok(#"{"op":"set","name":"r","data":{"v":0}}"#)
            // Make sure hub B has the record too, then race version 1 → 2.
            _ = try onB.ok(#"{"op":"get","name":"r"}"#)
            for round in 1...20 {
                let base = round
                onA.send(#"{"op":"set","name":"r","version":\#(base),"data":{"by":"a","round":\#(round)},"id":"a"}"#)
                onB.send(#"{"op":"set","name":"r","version":\#(base),"data":{"by":"b","round":\#(round)},"id":"b"}"#)
                let answers = [try onA.next(), try onB.next()]
                let winners = answers.filter { $0["ok"] == true }
                let conflicts = answers.filter { $0.errorCode == "conflict" }
                #expect(winners.count == 1, "round \(round): \(answers.map(\.text))")
                #expect(conflicts.count == 1, "round \(round): \(answers.map(\.text))")
                #expect(winners.first?["version"] == .number(JSONNumber(Int64(base + 1))))
            }
            let final = try onB.ok(#"{"op":"get","name":"r"}"#)
            #expect(final["version"] == 21)
        }
    }

    /// Eight clients, four on each hub, each with 25 writes in flight:
    /// increments, versioned sets and keyed retries over a few records.
    /// Every request is answered once, in order; a record's version counts
    /// every acknowledged write to it, once (a keyed retry answered from
    /// the first is none); subscribers on both hubs see one gap-free sequence.
    @Test func busyClientsOnBothHubsAreAnsweredOnceInOrder() throws {
        try withHubPair { pair in
            let watchers = [try pair.a.connect(), try pair.b.connect()]
            for watcher in watchers { try watcher.ok(#"{"op":"subscribe","prefix":"c/"}"#) }
            let clients = try (0..<8).map { index in try (index % 2 == 0 ? pair.a : pair.b).connect() }
            var acknowledgedWrites = [Int](repeating: 0, count: 4)
            var random = SystemRandomNumberGenerator()
            let perClient = 100, window = 25
            var sent = [Int](repeating: 0, count: clients.count)
            var received = [Int](repeating: 0, count: clients.count)
            // Per request: the record it writes, and whether an acknowledgement
            // is a new write (a retry of a key already used is not).
            var kinds: [[(record: Int, writes: Bool)]] = Array(repeating: [], count: clients.count)
            func send(_ client: Int) {
                let n = sent[client]
                let record = Int.random(in: 0..<4, using: &random)
                let id = "\(client)-\(n)"
                if n % 10 == 9, kinds[client][n - 1].writes, (n - 1) % 3 != 0 {
                    // A keyed retry of this client's previous increment, on
                    // whichever hub: answered with the first answer.
                    let key = "k\(client)-\(n - 1)"
                    clients[client].send(#"{"op":"increment","name":"c/\#(record)","path":"n","idem":"\#(key)","id":"\#(id)"}"#)
                    kinds[client].append((kinds[client][n - 1].record, false))
                } else if n % 3 == 0 {
                    clients[client].send(#"{"op":"set","name":"c/\#(record)","version":\#(Int.random(in: 1...20, using: &random)),"data":{"n":0},"id":"\#(id)"}"#)
                    kinds[client].append((record, true))
                } else {
                    clients[client].send(#"{"op":"increment","name":"c/\#(record)","path":"n","idem":"k\#(client)-\#(n)","id":"\#(id)"}"#)
                    kinds[client].append((record, true))
                }
                sent[client] += 1
            }
            for client in clients.indices { for _ in 0..<window { send(client) } }
            var done = false
            while !done {
                done = true
                for client in clients.indices where received[client] < perClient {
                    done = false
                    let answer = try clients[client].next()
                    let n = received[client]
                    #expect(answer["id"] == .string("\(client)-\(n)"), "\(answer.text)")
                    if answer["ok"] == true {
                        let kind = kinds[client][n]
                        if kind.writes { acknowledgedWrites[kind.record] += 1 }
                    } else {
                        #expect(answer.errorCode == "conflict", "\(answer.text)")
                    }
                    received[client] += 1
                    if sent[client] < perClient { send(client) }
                }
            }
            // Versions count every acknowledged write (a keyed retry is not one).
            var expectedPushes = 0
            for record in 0..<4 {
                let got = try clients[0].ok(#"{"op":"get","name":"c/\#(record)"}"#)
                #expect(got["version"] == .number(JSONNumber(Int64(acknowledgedWrites[record]))), "c/\(record): \(got.text)")
                expectedPushes += acknowledgedWrites[record]
            }
            for watcher in watchers {
                var seqs: [Int64] = []
                while seqs.count < expectedPushes {
                    let push = try watcher.push()
                    seqs.append(push["seq"]?.numberValue?.int64Value ?? -1)
                }
                #expect(seqs == Array(1...Int64(expectedPushes)))
            }
        }
    }

    @Test func anIdempotencyKeyRetriedOnTheOtherHubIsAnsweredOnce() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            let onB = try pair.b.connect()
            let first = try onA.ok(#"{"op":"increment","name":"k","path":"n","idem":"once"}"#)
            let retry = try onB.ok(#"{"op":"increment","name":"k","path":"n","idem":"once"}"#)
            #expect(retry["seq"] == first["seq"])
            #expect(retry["value"] == 1)
            let got = try onB.ok(#"{"op":"get","name":"k"}"#)
            #expect(got["version"] == 1)
            #expect(got["data"] == ["n": 1])
        }
    }

    @Test func stockNeverGoesBelowZeroThroughTwoHubs() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            let onB = try pair.b.connect()
            try onA.ok(#"{"op":"set","name":"items/drill","data":{"name":"Drill","stock":3}}"#)
            // Six issue orders of one each, three per hub, all delivered.
            var orders: [(SyncClient, String)] = []
            for index in 0..<6 {
                let client = index % 2 == 0 ? onA : onB
                let name = "orders/o\(index)"
                try client.ok(#"{"op":"set","name":"\#(name)","data":{"item":"items/drill","qty":1,"kind":"issue"}}"#)
                orders.append((client, name))
            }
            for (client, name) in orders {
                for stage in ["in-progress", "ready"] {
                    try client.ok(#"{"op":"advance","name":"\#(name)","to":"\#(stage)"}"#)
                }
            }
            for (client, name) in orders {
                client.send(#"{"op":"advance","name":"\#(name)","to":"delivered","id":"\#(name)"}"#)
            }
            var delivered = 0
            var refused = 0
            for (client, name) in orders {
                // Each client's answers come in its requests' order, once each.
                let answer = try client.next()
                #expect(answer["id"] == .string(name), "\(answer.text)")
                if answer["ok"] == true { delivered += 1 } else if answer.errorCode == "insufficient_stock" { refused += 1 }
            }
            #expect(delivered == 3)
            #expect(refused == 3)
            let item = try onB.ok(#"{"op":"get","name":"items/drill"}"#)
            #expect(item["data"]?.objectValue?["stock"] == 0)
            // Both hubs' stats agree with a recount: 3 delivered, 3 ready.
            for client in [onA, onB] {
                let stats = try client.ok(#"{"op":"get","name":"stats/orders"}"#)
                let counts = stats["data"]?.objectValue?["counts"]?.objectValue
                #expect(counts?["delivered"] == 3, "\(stats.text)")
                #expect(counts?["ready"] == 3, "\(stats.text)")
            }
        }
    }

    @Test func aClientResumesOnTheOtherHubFromWhatItSawOnTheFirst() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            let subscribed = try onA.ok(#"{"op":"subscribe","name":"doc"}"#)
            #expect(subscribed["seq"] == 0)
            try onA.ok(#"{"op":"set","name":"doc","data":{"n":1}}"#)
            let seen = try onA.push()["seq"]
            try onA.ok(#"{"op":"set","name":"doc","data":{"n":2}}"#)
            _ = try onA.push()
            onA.close()
            // Hub A goes on after the client lost it; the client resumes on B
            // from the last seq it saw, at once: B may not have heard yet.
            let writer = try pair.a.connect()
            try writer.ok(#"{"op":"set","name":"doc","data":{"n":3}}"#)
            let onB = try pair.b.connect()
            let resumed = try onB.ok(#"{"op":"subscribe","name":"doc","since":\#(seen?.description ?? "0")}"#)
            let changes = resumed["changes"]?.arrayValue ?? []
            #expect(resumed["resnapshot"] == nil, "\(resumed.text)")
            #expect(changes.map { $0.objectValue?["data"] } == [["n": 2], ["n": 3]], "\(resumed.text)")
        }
    }

    /// PostgreSQL away: writes are refused `unavailable` (REST 503 with
    /// Retry-After), `/healthz` says 503, the hub stays up; back, the next
    /// write commits after everything acknowledged before, with no gap.
    @Test func writesAreUnavailableWhilePostgreSQLIsAwayAndGoOnAfter() throws {
        let cluster = try PostgresCluster.start(fsync: false)
        defer { cluster.destroy() }
        let url = try cluster.createDatabase("away")
        let hub = try HubFixture(store: try PostgresStore(url: url))
        defer { hub.close() }
        let client = try hub.connect()
        let first = try client.ok(#"{"op":"set","name":"kept","data":{"n":1}}"#)
        #expect(try hub.http("GET", "/healthz").status == 200)

        try cluster.stop()
        let refused = try client.request(#"{"op":"set","name":"lost","data":{"n":2}}"#)
        #expect(refused.errorCode == "unavailable", "\(refused.text)")
        #expect(refused.error?["message"]?.stringValue?.contains("acknowledged") == true)
        let rest = try hub.http("PUT", "/v1/records/lost", body: #"{"n":3}"#)
        #expect(rest.status == 503)
        #expect(rest.header("Retry-After") != nil)
        try waitUntil("healthz to say unavailable", timeoutMillis: 10_000, intervalMillis: 50) {
            try hub.http("GET", "/healthz").status == 503
        }
        let health = try hub.http("GET", "/healthz").json
        #expect(health["status"] == "unavailable" && health["storeReachable"] == false)

        try cluster.start()
        try waitUntil("healthz to say ok", timeoutMillis: 15_000, intervalMillis: 50) {
            try hub.http("GET", "/healthz").status == 200
        }
        let next = try client.ok(#"{"op":"set","name":"after","data":{"n":4}}"#)
        #expect(next["seq"] == .number(JSONNumber((first["seq"]?.numberValue?.int64Value ?? 0) + 1)))
        let changes = try hub.storeReader().changes(after: 0, limit: 10).map(\.name)
        #expect(changes == ["kept", "after"])
    }

    /// The database loses its last commits (restored from a backup, or a
    /// standby promoted that had not received them): the next write moves
    /// the head 2^32 on, both hubs start over there and close their
    /// connections, no seq a client saw is handed out again, and a resume
    /// from such a seq resnapshots. Nothing spins meanwhile.
    @Test func hubsMoveOnWhenTheStoreLosesItsLastCommits() throws {
        let url = try PostgresCluster.shared().createDatabase("lost")
        let a = try HubFixture(store: try PostgresStore(url: url))
        defer { a.close() }
        let b = try HubFixture(store: try PostgresStore(url: url))
        defer { b.close() }
        let writer = try a.connect()
        for n in 1...3 { try writer.ok(#"{"op":"set","name":"doc","data":{"n":\#(n)}}"#) }
        let watcher = try b.connect()
        let subscribed = try watcher.ok(#"{"op":"subscribe","name":"doc"}"#)
        #expect(subscribed["seq"] == 3)
        // The store goes back to seq 1, as a promoted standby would.
        let admin = try PostgresConnection(url: url)
        try admin.execute(script: """
            DELETE FROM tally_changes WHERE seq > 1; UPDATE tally_head SET seq = 1;
            UPDATE tally_records SET version = 1, seq = 1, data = convert_to('{"n":1}', 'UTF8')
            """)

        // The next write meets the head behind: the hubs start over and
        // close every connection so that clients resume.
        writer.send(#"{"op":"set","name":"doc","data":{"n":4},"idem":"after-loss","id":"w"}"#)
        var closed = false
        do { _ = try writer.next() } catch { closed = true }
        if !closed { _ = try? writer.next() }
        let again = try a.connect()
        let written = try again.ok(#"{"op":"set","name":"doc","data":{"n":4},"idem":"after-loss"}"#)
        let seq = try #require(written["seq"]?.numberValue?.int64Value)
        #expect(seq > 1 << 32, "\(written.text)")
        // The other hub went on too: its writes follow, a resume from a seq
        // the store lost resnapshots.
        let onB = try b.connect()
        let next = try onB.ok(#"{"op":"set","name":"doc","data":{"n":5}}"#)
        #expect(next["seq"]?.numberValue?.int64Value == seq + 1)
        let resumed = try onB.ok(#"{"op":"subscribe","name":"doc","since":3}"#)
        #expect(resumed["resnapshot"] == true, "\(resumed.text)")
        #expect(resumed["record"]?.objectValue?["data"] == ["n": 5])
        let metrics = String(decoding: try a.http("GET", "/metrics").body, as: UTF8.self)
        let moves = metrics.split(separator: "\n").first { $0.hasPrefix("tally_store_head_moves_total ") }
        #expect((moves.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 99) < 10, "\(moves ?? "no metric")")
    }

    @Test func aLiveQueryOnTheOtherHubSeesRecordsEnterAndLeave() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            try onA.ok(#"{"op":"set","name":"items/x","data":{"stock":10}}"#)
            let onB = try pair.b.connect()
            let subscribed = try onB.ok(#"{"op":"subscribe","query":{"prefix":"orders/","where":{"stage":["received"]}}}"#)
            let query = subscribed["query"]
            try onA.ok(#"{"op":"set","name":"orders/1","data":{"item":"items/x","qty":1}}"#)
            let entered = try onB.push()
            #expect(entered["op"] == "query" && entered["query"] == query)
            #expect(entered["entered"]?.arrayValue?.first?.objectValue?["name"] == "orders/1")
            // A change that keeps it in the result, then one that takes it out.
            try onA.ok(#"{"op":"merge","name":"orders/1","data":{"note":"urgent"}}"#)
            let changed = try onB.push()
            #expect(changed["changed"]?.arrayValue?.first?.objectValue?["name"] == "orders/1", "\(changed.text)")
            try onA.ok(#"{"op":"advance","name":"orders/1","to":"in-progress"}"#)
            let left = try onB.push()
            #expect(left["left"] == ["orders/1"], "\(left.text)")
            try onB.expectNothingPending()
        }
    }

    @Test func pathSubscribersOnTheOtherHubSeeOnlyWhatConcernsThem() throws {
        try withHubPair { pair in
            let onA = try pair.a.connect()
            try onA.ok(#"{"op":"set","name":"items/x","data":{"name":"X","stock":1,"location":"A1"}}"#)
            let onB = try pair.b.connect()
            try onB.ok(#"{"op":"subscribe","name":"items/x","path":"stock"}"#)
            // A whole-record write that leaves `stock` alone is not pushed;
            // one that changes it is.
            try onA.ok(#"{"op":"set","name":"items/x","data":{"name":"X","stock":1,"location":"B2"}}"#)
            try onA.ok(#"{"op":"set","name":"items/x","path":"stock","value":5}"#)
            let push = try onB.push()
            #expect(push["path"] == "stock")
            #expect(push["value"] == 5)
            try onB.expectNothingPending()
        }
    }
}
