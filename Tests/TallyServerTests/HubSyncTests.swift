@preconcurrency import Glibc
import Testing
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyStore
import TallyTestSupport

// The sync protocol end to end: a real Hub (MemoryStore) on 127.0.0.1, clients
// on /v1/ws, checked against PROTOCOL.md's delivery guarantees.

@Suite("Hub: sync protocol over WebSocket")
struct HubSyncTests {
    @Test func setIsAcknowledgedAfterCommitAndPushed() throws {
        try withHub { hub in
            let watcher = try hub.connect()
            let writer = try hub.connect()
            let subscribed = try watcher.ok(#"{"op":"subscribe","name":"jobs/42","id":1}"#)
            #expect(subscribed["id"] == 1)
            #expect(subscribed["seq"] == 0)
            #expect(subscribed["record"] == .null)

            let reply = try writer.ok(#"{"op":"set","name":"jobs/42","data":{"stage":"new"},"id":"w1"}"#)
            #expect(Set(reply.object.keys) == ["id", "ok", "name", "version", "seq"])
            #expect(reply["id"] == "w1")
            #expect(reply["name"] == "jobs/42")
            #expect(reply["version"] == 1)
            #expect(reply["seq"] == 1)
            // Acknowledged means durable: the store already has it.
            let reader = try hub.storeReader()
            let stored = try reader.record("jobs/42")
            #expect(stored?.version == 1)
            #expect(try reader.state().headSeq >= 1)

            let push = try watcher.push()
            #expect(Set(push.object.keys) == ["op", "seq", "time", "name", "version", "kind", "data"])
            #expect(push["op"] == "change")
            #expect(push["seq"] == 1)
            #expect(push["kind"] == "set")
            #expect(push["data"] == ["stage": "new"])
            #expect(stored.map { Array($0.data) } == Array(#"{"stage":"new"}"#.utf8))
            try watcher.expectNothingPending()
            // The writer is not subscribed: it gets no push.
            try writer.expectNothingPending()
        }
    }

    @Test func replyComesBeforeThePushOnTheWritersConnection() throws {
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"subscribe","name":"r"}"#)
            // Pipelined: three requests before reading anything.
            client.send(#"{"op":"set","name":"r","data":{"n":1},"id":1}"#)
            client.send(#"{"op":"increment","name":"r","path":"n","id":2}"#)
            client.send(#"{"op":"get","name":"r","id":3}"#)
            var order: [String] = []
            for _ in 0..<5 {
                let message = try client.next()
                if message.isPush {
                    order.append("push \(message["seq"].map(\.description) ?? "?")")
                } else {
                    order.append("reply \(message["id"].map(\.description) ?? "?")")
                }
            }
            #expect(order == ["reply 1", "push 1", "reply 2", "push 2", "reply 3"])
            try client.expectNothingPending()
        }
    }

    @Test func getAndSubscribeSnapshots() throws {
        try withHub { hub in
            let client = try hub.connect()
            let set = try client.ok(#"{"op":"set","name":"jobs/42","data":{"stage":"new","items":[{"qty":2}]}}"#)
            let got = try client.ok(#"{"op":"get","name":"jobs/42","id":"g"}"#)
            #expect(Set(got.object.keys) == ["id", "ok", "name", "version", "seq", "created", "updated", "data"])
            #expect(got["version"] == 1)
            #expect(got["seq"] == set["seq"])
            #expect(got["data"] == ["stage": "new", "items": [["qty": 2]]])
            #expect(got["created"] == got["updated"])

            let value = try client.ok(#"{"op":"get","name":"jobs/42","path":"items[0].qty"}"#)
            #expect(Set(value.object.keys) == ["ok", "name", "version", "seq", "created", "updated", "path", "value"])
            #expect(value["path"] == "items[0].qty")
            #expect(value["value"] == 2)

            #expect(try client.request(#"{"op":"get","name":"jobs/42","path":"items[3]","id":9}"#).errorCode == "not_found")
            let missing = try client.request(#"{"op":"get","name":"jobs/43","id":9}"#)
            #expect(missing["ok"] == false)
            #expect(missing["id"] == 9)
            #expect(missing.errorCode == "not_found")
            #expect(try client.request(#"{"op":"get","list":"orders"}"#).errorCode == "not_found")

            try client.ok(#"{"op":"addEntry","list":"orders","entry":"jobs/42"}"#)
            let list = try client.ok(#"{"op":"get","list":"orders"}"#)
            #expect(list["list"] == "orders")
            #expect(list["version"] == 1)
            #expect(list["seq"] == 2)
            #expect(list["entries"] == ["jobs/42"])

            // Subscribe snapshots: record, absent record, path, list.
            let record = try client.ok(#"{"op":"subscribe","name":"jobs/42"}"#)
            #expect(Set(record.object.keys) == ["ok", "seq", "record"])
            #expect(record["seq"] == 2)
            #expect(record["record"]?["data"] == ["stage": "new", "items": [["qty": 2]]])
            #expect(record["record"]?["version"] == 1)
            #expect(try client.ok(#"{"op":"subscribe","name":"nope"}"#)["record"] == .null)
            let path = try client.ok(#"{"op":"subscribe","name":"jobs/42","path":"stage"}"#)
            #expect(path["record"]?["path"] == "stage")
            #expect(path["record"]?["value"] == "new")
            #expect(path["record"]?["data"] == nil)
            let noValue = try client.ok(#"{"op":"subscribe","name":"jobs/42","path":"none"}"#)
            #expect(noValue["record"]?["path"] == "none")
            #expect(noValue["record"]?["value"] == nil)
            let listSnapshot = try client.ok(#"{"op":"subscribe","list":"orders"}"#)
            #expect(listSnapshot["list"]?["entries"] == ["jobs/42"])
            #expect(listSnapshot["list"]?["version"] == 1)
            #expect(try client.ok(#"{"op":"subscribe","list":"none"}"#)["list"] == .null)
            // Subscribing again answers like the first time.
            #expect(try client.ok(#"{"op":"subscribe","name":"jobs/42"}"#)["record"]?["version"] == 1)
            // One change, several matching subscriptions: one push.
            try client.ok(#"{"op":"set","name":"jobs/42","path":"stage","value":"ready"}"#)
            #expect(try client.push()["seq"] == 3)
            try client.expectNothingPending()
        }
    }

    @Test func prefixGetAndSubscription() throws {
        try withHub { hub in
            let writer = try hub.connect()
            for name in ["jobs/2", "jobs/10", "jobs/1", "other/1", "orders"] {
                try writer.ok(#"{"op":"set","name":"\#(name)","data":{"n":"\#(name)"}}"#)
            }
            let page = try writer.ok(#"{"op":"get","prefix":"jobs/","limit":2}"#)
            #expect(page["seq"] == 5)
            #expect(page["records"]?.arrayValue?.map { $0["name"] } == ["jobs/1", "jobs/10"])
            #expect(page["more"] == true)
            let rest = try writer.ok(#"{"op":"get","prefix":"jobs/","after":"jobs/10"}"#)
            #expect(rest["records"]?.arrayValue?.map { $0["name"] } == ["jobs/2"])
            #expect(rest["more"] == false)
            // A page that holds exactly the last records says more: false.
            let exact = try writer.ok(#"{"op":"get","prefix":"jobs/","limit":3}"#)
            #expect(exact["records"]?.arrayValue?.count == 3)
            #expect(exact["more"] == false)
            let all = try writer.ok(#"{"op":"get","prefix":""}"#)
            #expect(all["records"]?.arrayValue?.count == 5)

            let watcher = try hub.connect()
            let snapshot = try watcher.ok(#"{"op":"subscribe","prefix":"jobs/"}"#)
            #expect(snapshot["seq"] == 5)
            #expect(snapshot["records"]?.arrayValue?.map { $0["name"] } == ["jobs/1", "jobs/10", "jobs/2"])
            #expect(snapshot["records"]?.arrayValue?.first?["data"] == ["n": "jobs/1"])
            #expect(snapshot["more"] == false)

            try writer.ok(#"{"op":"set","name":"jobs/3","data":{}}"#)
            try writer.ok(#"{"op":"set","name":"other/2","data":{}}"#)
            try writer.ok(#"{"op":"set","name":"orders","data":{"x":1}}"#)
            try writer.ok(#"{"op":"delete","name":"jobs/1"}"#)
            try writer.ok(#"{"op":"addEntry","list":"jobs/list","entry":"x"}"#)
            let created = try watcher.push()
            #expect(created["name"] == "jobs/3")
            #expect(created["seq"] == 6)
            let deleted = try watcher.push()
            #expect(deleted["name"] == "jobs/1")
            #expect(deleted["kind"] == "delete")
            #expect(deleted["seq"] == 9)
            try watcher.expectNothingPending()

            #expect(try watcher.ok(#"{"op":"unsubscribe","prefix":"jobs/"}"#).object.keys == ["ok"])
            #expect(try watcher.request(#"{"op":"unsubscribe","prefix":"jobs/"}"#).errorCode == "not_subscribed")
            try writer.ok(#"{"op":"set","name":"jobs/4","data":{}}"#)
            try watcher.expectNothingPending()
        }
    }

    @Test func pathSubscriptionGetsOnlyOverlappingChanges() throws {
        try withHub { hub in
            let writer = try hub.connect()
            let watcher = try hub.connect()
            try writer.ok(#"{"op":"set","name":"o","data":{"stage":"new","items":[{"qty":1}]}}"#)
            try watcher.ok(#"{"op":"subscribe","name":"o","path":"items[0]"}"#)

            try writer.ok(#"{"op":"set","name":"o","path":"stage","value":"ready"}"#)            // 2: no
            try writer.ok(#"{"op":"increment","name":"o","path":"items[0].qty","by":2}"#)        // 3: yes
            try writer.ok(#"{"op":"merge","name":"o","data":{"note":"x"}}"#)                   // 4: no
            try writer.ok(#"{"op":"set","name":"o","path":"items","value":[{"qty":7}]}"#)      // 5: yes
            try writer.ok(#"{"op":"set","name":"o","data":{"stage":"x","items":[{"qty":7}]}}"#) // 6: no (same value)
            try writer.ok(#"{"op":"set","name":"o","data":{"items":[{"qty":8}]}}"#)              // 7: yes
            try writer.ok(#"{"op":"set","name":"o","path":"items[1]","value":{}}"#)              // 8: no
            try writer.ok(#"{"op":"delete","name":"o"}"#)                                      // 9: yes

            var seqs: [JSONValue?] = []
            for _ in 0..<4 { seqs.append(try watcher.push()["seq"]) }
            #expect(seqs == [3, 5, 7, 9])
            try watcher.expectNothingPending()
        }
    }

    @Test func resumeReplaysExactlyTheMissedChanges() throws {
        try withHub { hub in
            let writer = try hub.connect()
            let live = try hub.connect()
            try live.ok(#"{"op":"subscribe","prefix":"jobs/"}"#)
            try writer.ok(#"{"op":"set","name":"jobs/1","data":{"v":1}}"#)
            _ = try live.push()

            let leaving = try hub.connect()
            let first = try leaving.ok(#"{"op":"subscribe","prefix":"jobs/"}"#)
            let since = try #require(first["seq"]?.numberValue?.int64Value)
            #expect(since == 1)
            leaving.close()

            try writer.ok(#"{"op":"set","name":"jobs/2","data":{"v":2}}"#)
            try writer.ok(#"{"op":"set","name":"other","data":{}}"#)
            try writer.ok(#"{"op":"set","name":"jobs/1","path":"v","value":3}"#)
            try writer.ok(#"{"op":"addEntry","list":"jobs/1","entry":"e"}"#)
            try writer.ok(#"{"op":"delete","name":"jobs/2"}"#)
            var livePushes: [[UInt8]] = []
            for _ in 0..<3 { livePushes.append(try live.push().bytes) }

            let back = try hub.connect()
            let resumed = try back.ok(#"{"op":"subscribe","prefix":"jobs/","since":\#(since)}"#)
            #expect(Set(resumed.object.keys) == ["ok", "seq", "changes"])
            #expect(resumed["seq"] == 6)
            let changes = try #require(resumed["changes"]?.arrayValue)
            #expect(changes.map { $0["seq"] } == [2, 4, 6])
            // Byte for byte as they were pushed.
            #expect(changes == (try livePushes.map { try JSONValue.parse($0) }))
            let expectedText = livePushes.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ",")
            #expect(resumed.text.contains("\"changes\":[" + expectedText + "]"))

            // Then live pushes.
            try writer.ok(#"{"op":"set","name":"jobs/9","data":{}}"#)
            #expect(try back.push()["seq"] == 7)
            try back.expectNothingPending()

            // Nothing missed: an empty replay. The hello since is the default.
            let other = try hub.connect()
            let hello = try other.ok(#"{"op":"hello","protocol":1,"since":7}"#)
            #expect(hello["resumable"] == true)
            let none = try other.ok(#"{"op":"subscribe","name":"jobs/9"}"#)
            #expect(none["changes"] == [])
            #expect(none["record"] == nil)
            // A record and a list subscription replay their own changes only.
            let record = try other.ok(#"{"op":"subscribe","name":"jobs/1","since":1}"#)
            #expect(record["changes"]?.arrayValue?.map { $0["seq"] } == [4])
            let list = try other.ok(#"{"op":"subscribe","list":"jobs/1","since":0}"#)
            #expect(list["changes"]?.arrayValue?.map { $0["seq"] } == [5])
        }
    }

    /// The log is scanned by seq, so a resume further back than the scan
    /// bound gets a snapshot even while the log still holds the changes.
    @Test func resumeBeyondTheScanBoundResnapshots() throws {
        try withHub({ $0.core.maxReplayScan = 3 }) { hub in
            let client = try hub.connect()
            for n in 1...5 { try client.ok(#"{"op":"set","name":"r","data":{"n":\#(n)}}"#) }
            let near = try client.ok(#"{"op":"subscribe","name":"r","since":2}"#)
            #expect(near["changes"]?.arrayValue?.map { $0["seq"] } == [3, 4, 5])
            let far = try hub.connect().ok(#"{"op":"subscribe","name":"r","since":1}"#)
            #expect(far["resnapshot"] == true)
            #expect(far["record"]?["data"] == ["n": 5])
            #expect(try hub.connect().ok(#"{"op":"hello","since":1}"#)["resumable"] == false)
            #expect(try hub.connect().ok(#"{"op":"hello","since":2}"#)["resumable"] == true)
        }
    }

    @Test func resumeOutsideTheLogResnapshots() throws {
        try withHub({ $0.retention = StoreRetention(maxChanges: 2) }) { hub in
            let client = try hub.connect()
            for n in 1...6 { try client.ok(#"{"op":"set","name":"r","data":{"n":\#(n)}}"#) }
            // Pruning runs after commits, on the store writer's thread, in
            // steps and after the acknowledgements: wait until the log is
            // down to its 2 changes, when the floor stops moving.
            let reader = try hub.storeReader()
            try waitUntil("the log pruned to 2 changes", timeoutMillis: messageTimeout) {
                try reader.state().changeCount <= 2
            }
            let floor = try reader.state().floorSeq
            #expect(floor == 4)

            let old = try client.ok(#"{"op":"subscribe","name":"r","since":0}"#)
            #expect(old["resnapshot"] == true)
            #expect(old["changes"] == nil)
            #expect(old["record"]?["data"] == ["n": 6])
            let hello = try hub.connect().ok(#"{"op":"hello","since":0}"#)
            #expect(hello["resumable"] == false)
            #expect(hello["floor"] == .int(floor))
            let rest = try hub.http("GET", "/v1/changes?since=0")
            #expect(rest.status == 410)
            #expect(try rest.json["error"]?["code"] == "resnapshot")
            // At the floor itself a resume still works.
            let atFloor = try client.ok(#"{"op":"subscribe","name":"r","since":\#(floor)}"#)
            #expect(atFloor["changes"]?.arrayValue?.map { $0["seq"] }.last == 6)
            // Ahead of the head (a hub restored from an older backup): snapshot too.
            let ahead = try client.ok(#"{"op":"subscribe","prefix":"","since":99}"#)
            #expect(ahead["resnapshot"] == true)
            #expect(ahead["records"]?.arrayValue?.count == 1)
        }
    }

    @Test func pathResumeReplaysOnlyWhatALiveSubscriberGot() throws {
        try withHub { hub in
            let writer = try hub.connect()
            let live = try hub.connect()
            try writer.ok(#"{"op":"set","name":"o","data":{"stage":"new","n":1}}"#)
            try live.ok(#"{"op":"subscribe","name":"o","path":"stage"}"#)
            try writer.ok(#"{"op":"set","name":"o","data":{"stage":"new","n":2}}"#)   // 2: stage unchanged
            try writer.ok(#"{"op":"set","name":"o","path":"stage","value":"done"}"#)  // 3
            #expect(try live.push()["seq"] == 3)
            try live.expectNothingPending()

            let back = try hub.connect()
            let resumed = try back.ok(#"{"op":"subscribe","name":"o","path":"stage","since":1}"#)
            // A resumed path subscriber gets exactly what a live one got: not the whole-record write that left the path alone.
            do {
                #expect(resumed["changes"]?.arrayValue?.map { $0["seq"] } == [3])
            }
        }
    }

    @Test func idempotentRetry() throws {
        try withHub { hub in
            let client = try hub.connect()
            let first = try client.ok(#"{"op":"set","name":"r","data":{"a":1},"idem":"key-1","id":1}"#)
            let retry = try client.ok(#"{"op":"set","name":"r","data":{"a":2},"idem":"key-1","id":2}"#)
            #expect(retry["id"] == 2)
            var withoutID = first.object
            withoutID["id"] = nil
            var retryWithoutID = retry.object
            retryWithoutID["id"] = nil
            #expect(retryWithoutID == withoutID)
            let got = try client.ok(#"{"op":"get","name":"r"}"#)
            #expect(got["version"] == 1)
            #expect(got["data"] == ["a": 1])
            // Atomic writes too, and the key is per hub, not per connection.
            let other = try hub.connect()
            let group = try other.ok(#"{"op":"write","idem":"key-2","ops":[{"op":"increment","name":"c","path":"n"}]}"#)
            let again = try client.ok(#"{"op":"write","idem":"key-2","ops":[{"op":"increment","name":"c","path":"n"}]}"#)
            #expect(again.object == group.object)
            #expect(try client.ok(#"{"op":"get","name":"c"}"#)["data"] == ["n": 1])
            // A refused write is not remembered: its retry is evaluated again.
            #expect(try client.request(#"{"op":"merge","name":"m","data":{},"idem":"key-3"}"#).errorCode == "not_found")
            try client.ok(#"{"op":"set","name":"m","data":{}}"#)
            #expect(try client.ok(#"{"op":"merge","name":"m","data":{"x":1},"idem":"key-3"}"#)["version"] == 2)
            // The store holds the answer too.
            #expect(try hub.storeReader().idempotency("key-1") != nil)
        }
    }

    @Test func idempotencyKeysCompareByBytes() throws {
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"a","data":{},"idem":"\u00e9"}"#)
            let second = try client.ok(#"{"op":"set","name":"b","data":{},"idem":"e\u0301"}"#)
            // Idempotency keys compare by bytes: "e\u0301" is not the key "é".
            let b = try client.request(#"{"op":"get","name":"b"}"#)
            do {
                #expect(second["name"] == "b")
                #expect(b["ok"] == true)
            }
        }
    }

    @Test func recordNamesCompareByBytes() throws {
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"\u00e9","data":{"which":"precomposed"}}"#)
            let other = try client.request(#"{"op":"get","name":"e\u0301"}"#)
            // The cache keys records by bytes, as the store does.
            do {
                #expect(other.errorCode == "not_found")
                let created = try client.ok(#"{"op":"set","name":"e\u0301","data":{}}"#)
                #expect(created["version"] == 1)
            }
        }
    }

    @Test func atomicWriteIsAllOrNothing() throws {
        try withHub { hub in
            let client = try hub.connect()
            let watcher = try hub.connect()
            try watcher.ok(#"{"op":"subscribe","prefix":""}"#)
            let failed = try client.request(#"""
                {"op":"write","id":"g1","ops":[
                  {"op":"set","name":"items/a","data":{"stock":4}},
                  {"op":"addEntry","list":"orders","entry":"jobs/9"},
                  {"op":"merge","name":"items/missing","data":{"x":1}}]}
                """#)
            #expect(failed["ok"] == false)
            #expect(failed["id"] == "g1")
            #expect(failed.errorCode == "not_found")
            #expect(failed.error?["index"] == 2)
            #expect(try client.request(#"{"op":"get","name":"items/a"}"#).errorCode == "not_found")
            #expect(try client.request(#"{"op":"get","list":"orders"}"#).errorCode == "not_found")
            try watcher.expectNothingPending()
            // Nothing was assigned a seq.
            #expect(try client.ok(#"{"op":"get","prefix":""}"#)["seq"] == 0)

            let done = try client.ok(#"""
                {"op":"write","ops":[
                  {"op":"set","name":"items/a","data":{"stock":4}},
                  {"op":"addEntry","list":"orders","entry":"jobs/9"},
                  {"op":"increment","name":"items/a","path":"stock","by":-1,"version":1}]}
                """#)
            #expect(Set(done.object.keys) == ["ok", "seq", "results"])
            #expect(done["seq"] == 3)
            let results = try #require(done["results"]?.arrayValue)
            #expect(results.count == 3)
            #expect(results[0] == ["name": "items/a", "version": 1, "seq": 1])
            #expect(results[1] == ["list": "orders", "version": 1, "seq": 2])
            #expect(results[2] == ["name": "items/a", "version": 2, "seq": 3, "value": 3])
            // The record pushes of the group, in seq order (the list is not under a prefix).
            #expect(try watcher.push()["seq"] == 1)
            #expect(try watcher.push()["seq"] == 3)
            try watcher.expectNothingPending()
            #expect(try hub.storeReader().record("items/a")?.version == 2)
        }
    }

    @Test func eventsReachTopicSubscribers() throws {
        try withHub { hub in
            let a = try hub.connect()
            let b = try hub.connect()
            let publisher = try hub.connect()
            #expect(try a.ok(#"{"op":"subscribe","topic":"scanner"}"#).object.keys == ["ok"])
            try b.ok(#"{"op":"subscribe","topic":"scanner"}"#)
            try b.ok(#"{"op":"subscribe","topic":"other"}"#)
            let reply = try publisher.ok(#"{"op":"publish","topic":"scanner","data":{"code":"123"},"id":5}"#)
            #expect(reply.object == ["id": 5, "ok": true, "delivered": 2])
            for client in [a, b] {
                let event = try client.push()
                #expect(event.object == ["op": "event", "topic": "scanner", "data": ["code": "123"]])
                try client.expectNothingPending()
            }
            // The publisher gets its own event when subscribed, after the reply.
            try publisher.ok(#"{"op":"subscribe","topic":"other"}"#)
            #expect(try publisher.ok(#"{"op":"publish","topic":"other","data":null}"#)["delivered"] == 2)
            #expect(try publisher.push()["data"] == .null)
            #expect(try b.push()["topic"] == "other")
            #expect(try publisher.ok(#"{"op":"publish","topic":"nobody","data":1}"#)["delivered"] == 0)
            // A closed subscriber is no longer counted.
            try a.ok(#"{"op":"unsubscribe","topic":"scanner"}"#)
            #expect(try publisher.ok(#"{"op":"publish","topic":"scanner","data":1}"#)["delivered"] == 1)
            try a.expectNothingPending()
        }
    }

    @Test func helloAndBadMessages() throws {
        try withHub { hub in
            let client = try hub.connect()
            let hello = try client.ok(#"{"op":"hello","protocol":[1,2],"client":"tests","id":0}"#)
            #expect(hello["protocol"] == 1)
            #expect(hello["seq"] == 0)
            #expect(hello["floor"] == 0)
            #expect(hello["server"]?.stringValue?.hasPrefix("tally/") == true)
            #expect(hello["resumable"] == nil)
            #expect(try client.request(#"{"op":"hello"}"#).errorCode == "bad_message")

            let unsupported = try hub.connect()
            let refused = try unsupported.request(#"{"op":"hello","protocol":2}"#)
            #expect(refused.errorCode == "unsupported_protocol")
            #expect(refused.error?["supported"] == [1])

            let unknown = try client.request(#"{"op":"frobnicate","id":7}"#)
            #expect(unknown.object.keys.sorted() == ["error", "id", "ok"])
            #expect(unknown["id"] == 7)
            #expect(unknown.errorCode == "unknown_op")
            let badName = try client.request(#"{"op":"get","name":"a//b","id":"x"}"#)
            #expect(badName["id"] == "x")
            #expect(badName.errorCode == "bad_name")
            #expect(badName.error?["field"] == "name")
            let badJSON = try client.request(#"{"op":"get","#)
            #expect(badJSON["id"] == nil)
            #expect(badJSON.errorCode == "bad_json")
            #expect(badJSON.error?["offset"] != nil)
            #expect(try client.request("[1]").errorCode == "bad_message")
            client.socket.send(.binary, [1, 2, 3])
            #expect(try client.next().errorCode == "binary_not_supported")
            // The connection stays open after every error.
            #expect(try client.ok(#"{"op":"set","name":"still/here","data":{}}"#)["seq"] == 1)
        }
    }
}
