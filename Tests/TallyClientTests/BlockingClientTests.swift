import Testing
import TallyClient
import TallyHubTestSupport
import TallyProtocol
import TallyServer
import TallyTestSupport

/// The one-shot face of the client stack: `BlockingTallyClient` over
/// `TallyClient`, `RESTClient` over `BlockingStream` and `HTTPResponseParser`,
/// against a hub in this process.
@Suite("Blocking client and REST", .serialized)
struct BlockingClientTests {
    @Test func requestsRepliesAndRefusals() throws {
        let hub = try RestartableHub.temporary(prefix: "blocking-hub")
        let client = try BlockingTallyClient(access: HubAccess(server: hub.url))
        defer { client.close() }
        let reply = try client.request(["op": "set", "name": "items/a", "data": ["qty": 1]])
        #expect(reply["ok"] == .bool(true) && reply["version"] == .int(1))
        do {
            _ = try client.request(["op": "get", "name": "items/none"])
            Issue.record("a missing record was found")
        } catch {
            #expect(error.code == "not_found")
            #expect(error.description.hasSuffix("(not_found)"))
        }
    }

    @Test func pushesComeInOrderAndALossEndsThem() throws {
        let hub = try RestartableHub.temporary(prefix: "blocking-hub")
        let client = try BlockingTallyClient(access: HubAccess(server: hub.url))
        defer { client.close() }
        _ = try client.request(["op": "subscribe", "prefix": "items/"])
        let writer = try BlockingTallyClient(access: HubAccess(server: hub.url))
        for qty in 1...3 { _ = try writer.request(["op": "set", "name": "items/p", "data": ["qty": .int(Int64(qty))]]) }
        writer.close()
        let pushes = try (1...3).map { _ in try #require(try client.nextPush(timeoutMillis: 5_000)) }
        #expect(pushes.map { $0["version"] } == [.int(1), .int(2), .int(3)])
        #expect(try client.nextPush(timeoutMillis: 50) == nil)
        hub.stop()
        do {
            _ = try client.nextPush(timeoutMillis: 5_000)
            Issue.record("no loss after the hub stopped")
        } catch {
            guard case .disconnected(let reason) = error else { Issue.record("\(error)"); return }
            #expect(reason.contains("closed the connection"), "\(reason)")
        }
        // It does not reconnect: the loss stays.
        try hub.start()
        #expect(throws: HubError.self) { try client.request(["op": "get", "name": "items/p"]) }
    }

    @Test func anUnreachableHubAndAnInsecureToken() throws {
        let hub = try RestartableHub.temporary(prefix: "blocking-hub")
        let url = hub.url
        hub.stop()
        do {
            _ = try BlockingTallyClient(access: HubAccess(server: url), connectTimeoutMillis: 2000)
            Issue.record("connected to a stopped hub")
        } catch {
            guard case .unreachable(let where_, let reason) = error else { Issue.record("\(error)"); return }
            #expect(where_ == url && reason.contains("Connection refused"), "\(reason)")
        }
        let remote = HubAccess(server: "http://hub.example:8080", token: "t")
        #expect(throws: HubError.insecureToken(url: "ws://hub.example:8080/v1/ws")) {
            try BlockingTallyClient(access: remote)
        }
        #expect(throws: HubError.insecureToken(url: "http://hub.example:8080/v1/blobs/x")) {
            try RESTClient(access: remote).get("/v1/blobs/x")
        }
    }

    @Test func aRefusedTokenFailsTheConnect() throws {
        let hub = try RestartableHub.temporary(prefix: "blocking-hub") { configuration in
            configuration.core.authenticator = Authenticator(users: [
                HubUser(name: "alice", role: "admin", tokenHash: Authenticator.sha256(Array("alice-token".utf8))),
            ])
        }
        do {
            _ = try BlockingTallyClient(access: HubAccess(server: hub.url, token: "wrong"))
            Issue.record("a wrong token was accepted")
        } catch {
            #expect(error.code == "unauthorized")
        }
        let client = try BlockingTallyClient(access: HubAccess(server: hub.url, token: "alice-token"))
        client.close()
    }

    @Test func restUploadsAndDownloadsABlob() throws {
        let hub = try RestartableHub.temporary(prefix: "blocking-hub")
        let rest = RESTClient(access: HubAccess(server: hub.url))
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 200_000)
        let sha = "ce0c3f64a8b7d3d19b2cd8b0bb6d0bc7f41df0c0c3c1e3b2c0f36a1fb3a3c4aa"
        var sent: [Int] = []
        var small = rest
        small.chunkSize = 64 << 10
        let wrong = try small.put("/v1/blobs/\(sha)", body: .bytes(png), headers: [("Content-Type", "image/png")],
                                  progress: { done, _ in sent.append(done) })
        #expect(wrong.status == 400 && wrong.refusal.code == "checksum_mismatch")
        let missing = try rest.get("/v1/resolve/\(RESTClient.percentEncode("no such/code"))")
        #expect(missing.status == 404 && missing.json?["found"] == .bool(false))
        #expect(RESTClient.percentEncode("a b/ü~") == "a%20b%2F%C3%BC~")
        let metrics = try rest.get("/metrics")
        #expect(metrics.status == 200 && String(decoding: metrics.body, as: UTF8.self).contains("tally_"))
    }
}

/// `tally watch`'s follower: a lost connection is replaced and the
/// subscription resumed from the last seq seen.
@Suite("BlockingFollower", .serialized)
struct BlockingFollowerTests {
    @Test func aLostConnectionResumesWithoutGapsOrRepeats() throws {
        let hub = try RestartableHub.temporary(prefix: "follower-hub")
        let access = HubAccess(server: hub.url)
        func write(_ name: String) throws {
            let writer = try BlockingTallyClient(access: access)
            defer { writer.close() }
            _ = try writer.request(["op": "set", "name": .string(name), "data": ["qty": 1]])
        }
        var follower = BlockingFollower(access: access, subscribe: ["op": "subscribe", "prefix": "items/"], since: nil)
        var changes: [String] = []
        var reconnects = 0
        var failure: (any Error)?
        try follower.run { event in
            do {
                switch event {
                case .snapshot:
                    try write("items/a")
                case .change(let change):
                    changes.append(change["name"]?.stringValue ?? "?")
                    if changes.count == 1 { hub.stop() }
                    return changes.count < 2
                case .lost:
                    try hub.start()
                    try write("items/b")
                case .reconnected:
                    reconnects += 1
                case .resnapshot:
                    Issue.record("the hub's log reaches back: no resnapshot")
                }
                return true
            } catch {
                failure = error
                return false
            }
        }
        #expect(failure == nil, "\(String(describing: failure))")
        #expect(changes == ["items/a", "items/b"])
        #expect(reconnects == 1)
        #expect(follower.since != nil)
    }
}
