import Testing
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyStore
import TallyTestSupport

// The REST face of the hub (PROTOCOL.md "REST") and a hub on a real SQLite
// directory that is stopped and started again.

@Suite("Hub: REST")
struct HubRESTTests {
    @Test func recordsPutGetPatchDelete() throws {
        try withHub { hub in
            let watcher = try hub.connect()
            try watcher.ok(#"{"op":"subscribe","name":"jobs/42"}"#)

            let created = try hub.http("PUT", "/v1/records/jobs/42", body: #"{"stage":"new"}"#)
            #expect(created.status == 201)
            #expect(created.header("ETag") == "\"1\"")
            #expect(created.header("Content-Type")?.hasPrefix("application/json") == true)
            let envelope = try created.json
            #expect(Set(envelope.keys) == ["name", "version", "seq", "created", "updated", "data"])
            #expect(envelope["name"] == "jobs/42")
            #expect(envelope["version"] == 1)
            #expect(envelope["seq"] == 1)
            #expect(envelope["data"] == ["stage": "new"])
            // The same change as a WebSocket write: committed and pushed.
            #expect(try hub.storeReader().record("jobs/42")?.version == 1)
            #expect(try watcher.push()["data"] == ["stage": "new"])

            let replaced = try hub.http("PUT", "/v1/records/jobs/42", body: #"{"stage":"ready"}"#)
            #expect(replaced.status == 200)
            #expect(replaced.header("ETag") == "\"2\"")

            let got = try hub.http("GET", "/v1/records/jobs/42")
            #expect(got.status == 200)
            #expect(got.header("ETag") == "\"2\"")
            #expect(try got.json["data"] == ["stage": "ready"])
            #expect(try got.json["version"] == 2)

            // If-Match: a stale ETag is refused with 412 and nothing changes.
            let stale = try hub.http("PUT", "/v1/records/jobs/42", headers: ["If-Match": "\"1\""], body: #"{"stage":"x"}"#)
            #expect(stale.status == 412)
            #expect(try stale.json["error"]?["code"] == "conflict")
            #expect(try stale.json["error"]?["version"] == 2)
            #expect(try stale.json["error"]?["data"] == ["stage": "ready"])
            let current = try hub.http("PUT", "/v1/records/jobs/42", headers: ["If-Match": "\"2\""], body: #"{"stage":"done"}"#)
            #expect(current.status == 200)
            #expect(current.header("ETag") == "\"3\"")
            #expect(try hub.http("PUT", "/v1/records/jobs/42", headers: ["If-Match": "*"], body: "{}").status == 400)
            #expect(try hub.http("PUT", "/v1/records/fresh", headers: ["If-Match": "\"0\""], body: "{}").status == 201)

            let patched = try hub.http("PATCH", "/v1/records/jobs/42", body: #"{"stage":null,"n":1}"#)
            #expect(patched.status == 200)
            #expect(patched.header("ETag") == "\"4\"")
            #expect(try patched.json["data"] == ["n": 1])
            #expect(try hub.http("PATCH", "/v1/records/unknown", body: "{}").status == 404)

            let deleted = try hub.http("DELETE", "/v1/records/jobs/42")
            #expect(deleted.status == 200)
            #expect(try deleted.json == ["name": "jobs/42", "version": 5, "seq": 6, "deleted": true])
            let missing = try hub.http("GET", "/v1/records/jobs/42")
            #expect(missing.status == 404)
            #expect(try missing.json["error"]?["code"] == "not_found")
            #expect(try hub.http("DELETE", "/v1/records/jobs/42").status == 404)

            // The watcher saw every change of its record, in order.
            var seqs: [JSONValue?] = []
            for _ in 0..<4 { seqs.append(try watcher.push()["seq"]) }
            #expect(seqs == [2, 3, 5, 6])
            try watcher.expectNothingPending()
        }
    }

    @Test func idempotencyKeyAndErrors() throws {
        try withHub { hub in
            let first = try hub.http("PUT", "/v1/records/r", headers: ["Idempotency-Key": "k1"], body: #"{"a":1}"#)
            #expect(first.status == 201)
            let retry = try hub.http("PUT", "/v1/records/r", headers: ["Idempotency-Key": "k1"], body: #"{"a":2}"#)
            // A retried creating PUT answers 201 again.
            #expect(retry.status == 201)
            #expect(try retry.json["version"] == 1)
            #expect(try hub.http("GET", "/v1/records/r").json["data"] == ["a": 1])

            let badName = try hub.http("GET", "/v1/records/a//b")
            #expect(badName.status == 400)
            #expect(try badName.json["error"]?["code"] == "bad_name")
            let notObject = try hub.http("PUT", "/v1/records/r", body: "[1]")
            #expect(notObject.status == 400)
            #expect(try notObject.json["error"]?["code"] == "bad_field")
            let badJSON = try hub.http("PUT", "/v1/records/r", body: "{")
            #expect(badJSON.status == 400)
            #expect(try badJSON.json["error"]?["code"] == "bad_json")
            #expect(try hub.http("PUT", "/v1/records/r", headers: ["Idempotency-Key": ""], body: "{}").status == 400)
        }
    }

    @Test func sizeLimitAndConditionalDelete() throws {
        try withHub({ $0.core.limits.maxRecordBytes = 32 }) { hub in
            let big = try hub.http("PUT", "/v1/records/r", body: #"{"text":"\#(String(repeating: "x", count: 40))"}"#)
            #expect(big.status == 413)
            #expect(try big.json["error"]?["code"] == "too_large")
            #expect(try big.json["error"]?["limit"] == 32)
            let client = try hub.connect()
            let refused = try client.request(#"{"op":"set","name":"r","data":{"text":"\#(String(repeating: "x", count: 40))"}}"#)
            #expect(refused.errorCode == "too_large")
            #expect(refused.error?["limit"] == 32)

            #expect(try hub.http("PUT", "/v1/records/r", body: #"{"a":1}"#).status == 201)
            #expect(try hub.http("DELETE", "/v1/records/r", headers: ["If-Match": "\"2\""]).status == 412)
            #expect(try hub.http("GET", "/v1/records/r").status == 200)
            // A weak validator names the same version.
            #expect(try hub.http("DELETE", "/v1/records/r", headers: ["If-Match": "W/\"1\""]).status == 200)
            #expect(try hub.http("GET", "/v1/records/r").status == 404)
        }
    }

    @Test func listsChangesAndEvents() throws {
        try withHub { hub in
            let listener = try hub.connect()
            try listener.ok(#"{"op":"subscribe","topic":"scanner"}"#)

            let added = try hub.http("POST", "/v1/lists/jobs/open/entries", body: #""jobs/42""#)
            #expect(added.status == 200)
            #expect(try added.json["name"] == "jobs/open")
            #expect(try added.json["entries"] == ["jobs/42"])
            #expect(try added.json["version"] == 1)
            let inserted = try hub.http("POST", "/v1/lists/jobs/open/entries?at=0", body: #""jobs/41""#)
            #expect(try inserted.json["entries"] == ["jobs/41", "jobs/42"])
            #expect(try hub.http("POST", "/v1/lists/jobs/open/entries?at=9", body: #""x""#).status == 400)
            let got = try hub.http("GET", "/v1/lists/jobs/open")
            #expect(got.status == 200)
            #expect(try got.json["entries"] == ["jobs/41", "jobs/42"])
            let removed = try hub.http("DELETE", "/v1/lists/jobs/open/entries/jobs/41")
            #expect(removed.status == 200)
            #expect(try removed.json["entries"] == ["jobs/42"])
            #expect(try hub.http("DELETE", "/v1/lists/jobs/open/entries/jobs/41").status == 404)
            #expect(try hub.http("GET", "/v1/lists/none").status == 404)

            #expect(try hub.http("PUT", "/v1/records/jobs/42", body: "{}").status == 201)
            let records = try hub.http("GET", "/v1/records?prefix=jobs/").json
            #expect(records["seq"] == 4)
            #expect(records["records"]?.arrayValue?.map { $0["name"] } == ["jobs/42"])
            #expect(records["more"] == false)

            let changes = try hub.http("GET", "/v1/changes?since=1").json
            #expect(records["seq"] == changes["seq"])
            #expect(changes["floor"] == 0)
            #expect(changes["changes"]?.arrayValue?.map { $0["seq"] } == [2, 3, 4])
            #expect(changes["changes"]?.arrayValue?.first?["kind"] == "addEntry")
            #expect(changes["more"] == false)
            let page = try hub.http("GET", "/v1/changes?since=0&limit=2").json
            #expect(page["changes"]?.arrayValue?.map { $0["seq"] } == [1, 2])
            #expect(page["more"] == true)
            #expect(try hub.http("GET", "/v1/changes").status == 400)

            let published = try hub.http("POST", "/v1/events/scanner", body: #"{"code":"9"}"#)
            #expect(published.status == 200)
            #expect(try published.json == ["delivered": 1])
            #expect(try listener.push().object == ["op": "event", "topic": "scanner", "data": ["code": "9"]])
        }
    }

    @Test func aHubThatCannotReachItsDatabaseAnswers503WithRetryAfter() {
        // `unavailable`: the write was not acknowledged; retry (here later, or on another hub).
        let unavailable = REST.response(for: ProtocolError(.unavailable, "the hub cannot reach its database"))
        #expect(unavailable.status.code == 503 && unavailable.headers["Retry-After"] == "2")
        #expect(String(decoding: unavailable.body, as: UTF8.self).contains(#""code":"unavailable""#))
        let full = REST.response(for: ProtocolError(.storageFailed, "disk full"))
        #expect(full.status.code == 503 && full.headers["Retry-After"] == "5")
        #expect(REST.response(for: ProtocolError(.shuttingDown, "bye")).headers["Retry-After"] == nil)
    }
}

@Suite("Hub: SQLite storage")
struct HubStorageTests {
    @Test func restartKeepsRecordsSeqAndKeys() throws {
        let directory = try TemporaryDirectory(prefix: "tally-hub")
        let firstReply: Message
        do {
            let hub = try HubFixture(dataDirectory: directory.path)
            defer { hub.close() }
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"jobs/1","data":{"stage":"new"}}"#)
            try client.ok(#"{"op":"set","name":"jobs/2","data":{}}"#)
            try client.ok(#"{"op":"addEntry","list":"orders","entry":"jobs/1"}"#)
            firstReply = try client.ok(#"{"op":"increment","name":"jobs/1","path":"n","idem":"inc-1"}"#)
            try client.ok(#"{"op":"delete","name":"jobs/2"}"#)
            // Acknowledged means in the SQLite file.
            let reader = try hub.storeReader()
            #expect(try reader.record("jobs/1")?.version == 2)
            #expect(try reader.record("jobs/2") == nil)
            #expect(try reader.state().headSeq == 5)
        }

        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            let hello = try client.ok(#"{"op":"hello"}"#)
            #expect(hello["seq"] == 5)
            let record = try client.ok(#"{"op":"get","name":"jobs/1"}"#)
            #expect(record["version"] == 2)
            #expect(record["seq"] == 4)
            #expect(record["data"] == ["stage": "new", "n": 1])
            #expect(try client.request(#"{"op":"get","name":"jobs/2"}"#).errorCode == "not_found")
            #expect(try client.ok(#"{"op":"get","list":"orders"}"#)["entries"] == ["jobs/1"])

            // The idempotency key survived: the retry changes nothing.
            let retry = try client.ok(#"{"op":"increment","name":"jobs/1","path":"n","idem":"inc-1"}"#)
            #expect(retry.object == firstReply.object)
            // Seqs continue where they stopped.
            let next = try client.ok(#"{"op":"set","name":"jobs/3","data":{}}"#)
            #expect(next["seq"] == 6)
            #expect(try client.ok(#"{"op":"get","name":"jobs/1"}"#)["version"] == 2)
            // The change log survived too: a resume across the restart.
            let resumed = try client.ok(#"{"op":"subscribe","prefix":"jobs/","since":0}"#)
            #expect(resumed["changes"]?.arrayValue?.map { $0["seq"] } == [1, 2, 4, 5, 6])
            // A recreated record starts at version 1.
            #expect(try client.ok(#"{"op":"set","name":"jobs/2","data":{}}"#)["version"] == 1)
        }
        withExtendedLifetime(directory) {}
    }
}
