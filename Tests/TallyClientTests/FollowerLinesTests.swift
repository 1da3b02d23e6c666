import Testing
import TallyClient
import TallyProtocol

/// What `tally watch` prints: snapshots, resnapshots as pushes, changes.
@Suite("BlockingFollower lines")
struct FollowerLinesTests {
    @Test func aSnapshotIsALinePerCurrentRecord() {
        let one: JSONObject = ["record": ["name": "notes/1", "version": 3, "data": ["text": "a"]]]
        #expect(BlockingFollower.snapshotLines(one) == [#"current notes/1 v3: {"text":"a"}"#])
        let path: JSONObject = ["record": ["name": "notes/1", "version": 3, "value": "a"]]
        #expect(BlockingFollower.snapshotLines(path) == [#"current notes/1 v3: "a""#])
        let many: JSONObject = ["records": [["name": "n/1", "version": 1, "data": [:]], ["name": "n/2", "version": 2]]]
        #expect(BlockingFollower.snapshotLines(many) == ["current n/1 v1: {}", "current n/2 v2: null"])
        #expect(BlockingFollower.snapshotLines(["list": ["name": "l"]]).isEmpty)
    }

    @Test func aResnapshotBecomesPushes() {
        let reply: JSONObject = ["records": [["name": "n/1", "version": 1]], "list": ["list": "l", "version": 4], "record": .null]
        #expect(BlockingFollower.snapshotPushes(reply) == [["name": "n/1", "version": 1, "op": "snapshot"],
                                                          ["list": "l", "version": 4, "op": "snapshot"]])
    }

    @Test func aChangeIsOneLine() {
        #expect(BlockingFollower.line(["op": "change", "seq": 9, "name": "notes/1", "version": 2, "kind": "setPath",
                                       "path": "text", "value": "b"]) == #"9 notes/1 v2 setPath text "b""#)
        #expect(BlockingFollower.line(["op": "event", "topic": "t", "data": 1]) == "- t v- event 1")
    }
}
