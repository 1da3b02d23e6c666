import Testing
@testable import TallyEngine
import TallyProtocol

// Engine.apply on records (PROTOCOL.md "Record writes", "Versions", "Pushes"),
// against a dictionary-backed state.

@Suite("Engine: record writes")
struct EngineRecordTests {
    // MARK: set

    @Test func setCreatesThenReplaces() throws {
        let hub = EngineHarness()
        let created = try hub.write(Write(name: "orders/42", action: .set(["stage": "new", "n": 1])))
        #expect(created.seq == 1)
        #expect(created.time == hub.now - 1)
        #expect(created.name == "orders/42")
        #expect(!created.isList)
        let record = try #require(hub.state.record(named: "orders/42"))
        #expect(record.version == 1)
        #expect(record.seq == 1)
        #expect(record.created == created.time)
        #expect(record.updated == created.time)
        #expect(record.data == ["stage": "new", "n": 1])
        #expect(record.dataBytes == JSONValue.object(record.data).serialized())
        guard case .record(let before, let after, .whole) = created.target else {
            Issue.record("not a whole-record change")
            return
        }
        #expect(before == nil)
        #expect(after == record)

        let replaced = try hub.write(Write(name: "orders/42", action: .set(["stage": "ready"])))
        let again = try #require(hub.state.record(named: "orders/42"))
        #expect(again.version == 2)
        #expect(again.seq == 2)
        #expect(again.created == record.created)
        #expect(again.updated == replaced.time)
        #expect(again.data == ["stage": "ready"])
        if case .record(let before, _, _) = replaced.target { #expect(before == record) }
    }

    @Test func setPushAndReplyMembers() throws {
        let hub = EngineHarness()
        let change = try hub.write(Write(name: "orders/42", action: .set(["stage": "ready", "items": [1, 2]])))
        let push = try pushObject(change)
        #expect(Set(push.keys) == ["op", "seq", "time", "name", "version", "kind", "data"])
        #expect(push["op"] == "change")
        #expect(push["seq"] == 1)
        #expect(push["time"] == .number(JSONNumber(change.time)))
        #expect(push["name"] == "orders/42")
        #expect(push["version"] == 1)
        #expect(push["kind"] == "set")
        #expect(push["data"] == ["stage": "ready", "items": [1, 2]])
        // The push starts with its fixed members, in the documented order.
        #expect(String(decoding: change.push, as: UTF8.self).hasPrefix(#"{"op":"change","seq":1,"time":"#))
        #expect(change.reply == ["name": "orders/42", "version": 1, "seq": 1])
    }

    // MARK: set at a path

    @Test func setPathCreatesRecordAndParents() throws {
        let hub = EngineHarness()
        let change = try hub.write(Write(name: "r", action: .setPath(path("a.b.c"), 1)))
        #expect(hub.state.record(named: "r")?.data == ["a": ["b": ["c": 1]]])
        #expect(hub.state.record(named: "r")?.version == 1)
        guard case .record(nil, _?, .path(let changed)) = change.target else {
            Issue.record("expected a path change creating the record")
            return
        }
        #expect(changed == path("a.b.c"))
        let push = try pushObject(change)
        #expect(Set(push.keys) == ["op", "seq", "time", "name", "version", "kind", "path", "value"])
        #expect(push["kind"] == "setPath")
        #expect(push["path"] == "a.b.c")
        #expect(push["value"] == 1)
        #expect(change.reply == ["name": "r", "version": 1, "seq": 1])

        try hub.write(Write(name: "r", action: .setPath(path("a.x"), ["deep": true])))
        #expect(hub.state.record(named: "r")?.data == ["a": ["b": ["c": 1], "x": ["deep": true]]])
        #expect(hub.state.record(named: "r")?.version == 2)
    }

    @Test func setPathNullValueIsPushedAsNull() throws {
        let hub = EngineHarness()
        let change = try hub.write(Write(name: "r", action: .setPath(path("gone"), .null)))
        let push = try pushObject(change)
        #expect(push["value"] == .null)
        #expect(hub.state.record(named: "r")?.data == ["gone": .null])
    }

    @Test func setPathAppendsAtTheEndOnly() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "r", action: .set(["items": [1, 2], "stage": "open"])))
        try hub.write(Write(name: "r", action: .setPath(path("items[2]"), 3)))
        try hub.write(Write(name: "r", action: .setPath(path("items[0]"), 0)))
        #expect(hub.state.record(named: "r")?.data["items"] == [0, 2, 3])

        let past = hub.error(Write(name: "r", action: .setPath(path("items[4]"), 5)))
        #expect(past?.code == .badPath)
        #expect(past?.details["field"] == "path")
        #expect(past?.details["offset"] == nil)
        #expect(past?.details["index"] == nil)
        // Through a scalar, and an index into something that is not an array.
        #expect(hub.error(Write(name: "r", action: .setPath(path("stage.x"), 1)))?.code == .badPath)
        #expect(hub.error(Write(name: "r", action: .setPath(path("stage[0]"), 1)))?.code == .badPath)
        #expect(hub.error(Write(name: "r", action: .setPath(path("missing[0]"), 1)))?.code == .badPath)
        #expect(hub.error(Write(name: "r", action: .setPath(path("items.x"), 1)))?.code == .badPath)
        // A record's root is an object: a path must start with a key.
        #expect(hub.error(Write(name: "r", action: .setPath(path("[0]"), 1)))?.code == .badPath)
        #expect(hub.state.record(named: "r")?.version == 3)
    }

    // MARK: merge

    /// RFC 7396 Appendix A, the cases whose target and patch are objects.
    static let rfc7396: [(JSONObject, JSONObject, JSONObject)] = [
        (["a": "b"], ["a": "c"], ["a": "c"]),
        (["a": "b"], ["b": "c"], ["a": "b", "b": "c"]),
        (["a": "b"], ["a": .null], [:]),
        (["a": "b", "b": "c"], ["a": .null], ["b": "c"]),
        (["a": ["b"]], ["a": "c"], ["a": "c"]),
        (["a": "c"], ["a": ["b"]], ["a": ["b"]]),
        (["a": ["b": "c"]], ["a": ["b": "d", "c": .null]], ["a": ["b": "d"]]),
        (["a": [["b": "c"]]], ["a": [1]], ["a": [1]]),
        (["e": .null], ["a": 1], ["e": .null, "a": 1]),
        (["a": "foo"], ["a": ["bb": ["ccc": .null]]], ["a": ["bb": [:]]]),
        ([:], ["a": ["bb": ["ccc": .null]]], ["a": ["bb": [:]]]),
        (["a": ["b": 1]], ["a": [:]], ["a": ["b": 1]]),
        (["a": 1], [:], ["a": 1]),
        (["a": ["b": ["c": 1, "d": 2]]], ["a": ["b": ["c": .null, "e": [3]]]], ["a": ["b": ["d": 2, "e": [3]]]]),
    ]

    @Test func mergePatchFollowsRFC7396() {
        for (target, patch, expected) in Self.rfc7396 {
            #expect(target.mergePatched(with: patch) == expected, "\(target) + \(patch)")
        }
    }

    @Test func mergeThroughApply() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "r", action: .set(["a": ["b": "c", "keep": 1], "gone": true])))
        let change = try hub.write(Write(name: "r", action: .merge(["a": ["b": "d"], "gone": .null, "new": [1]])))
        let expected: JSONObject = ["a": ["b": "d", "keep": 1], "new": [1]]
        #expect(hub.state.record(named: "r")?.data == expected)
        #expect(hub.state.record(named: "r")?.version == 2)
        // A merge is pushed as the record's whole new data.
        let push = try pushObject(change)
        #expect(Set(push.keys) == ["op", "seq", "time", "name", "version", "kind", "data"])
        #expect(push["kind"] == "set")
        #expect(push["data"] == .object(expected))
        guard case .record(_?, _?, .whole) = change.target else {
            Issue.record("a merge is a whole-record change")
            return
        }
    }

    @Test func mergeNeedsTheRecord() {
        let hub = EngineHarness()
        let error = hub.error(Write(name: "r", action: .merge(["a": 1])))
        #expect(error?.code == .notFound)
        #expect(hub.error(Write(name: "r", action: .merge(["a": 1]), baseVersion: 0))?.code == .notFound)
        #expect(hub.state.record(named: "r") == nil)
    }

    // MARK: delete

    @Test func deleteAndDeletePath() throws {
        let hub = EngineHarness()
        #expect(hub.error(Write(name: "r", action: .delete))?.code == .notFound)
        #expect(hub.error(Write(name: "r", action: .deletePath(path("a"))))?.code == .notFound)

        try hub.write(Write(name: "r", action: .set(["items": ["a", "b", "c"], "stage": "open", "meta": ["x": 1]])))
        let element = try hub.write(Write(name: "r", action: .deletePath(path("items[0]"))))
        #expect(hub.state.record(named: "r")?.data["items"] == ["b", "c"])
        let push = try pushObject(element)
        #expect(Set(push.keys) == ["op", "seq", "time", "name", "version", "kind", "path"])
        #expect(push["kind"] == "deletePath")
        #expect(push["path"] == "items[0]")
        #expect(push["version"] == 2)
        #expect(element.reply == ["name": "r", "version": 2, "seq": 2])
        guard case .record(_?, _?, .path(let changed)) = element.target else {
            Issue.record("a deletePath is a path change")
            return
        }
        #expect(changed == path("items[0]"))

        try hub.write(Write(name: "r", action: .deletePath(path("meta.x"))))
        #expect(hub.state.record(named: "r")?.data["meta"] == [:])

        // No value there: not_found, nothing applied.
        for missing in ["nothing", "items[2]", "stage.x", "meta.x", "items.x"] {
            let error = hub.error(Write(name: "r", action: .deletePath(path(missing))))
            #expect(error?.code == .notFound, "\(missing)")
        }
        #expect(hub.state.record(named: "r")?.version == 3)

        let deleted = try hub.write(Write(name: "r", action: .delete))
        #expect(hub.state.record(named: "r") == nil)
        let deletePush = try pushObject(deleted)
        #expect(Set(deletePush.keys) == ["op", "seq", "time", "name", "version", "kind"])
        #expect(deletePush["kind"] == "delete")
        #expect(deletePush["version"] == 4)
        #expect(deleted.reply == ["name": "r", "version": 4, "seq": 4])
        guard case .record(_?, nil, .whole) = deleted.target else {
            Issue.record("a delete is a whole-record change with no after")
            return
        }
        #expect(hub.error(Write(name: "r", action: .delete))?.code == .notFound)
    }

    // MARK: increment

    @Test func incrementCreatesAndCounts() throws {
        let hub = EngineHarness()
        let first = try hub.write(Write(name: "stats/scans", action: .increment(path("count"), by: 1)))
        #expect(hub.state.record(named: "stats/scans")?.data == ["count": 1])
        #expect(first.reply == ["name": "stats/scans", "version": 1, "seq": 1, "value": 1])
        let push = try pushObject(first)
        #expect(Set(push.keys) == ["op", "seq", "time", "name", "version", "kind", "path", "value"])
        #expect(push["kind"] == "setPath")
        #expect(push["path"] == "count")
        #expect(push["value"] == 1)

        let second = try hub.write(Write(name: "stats/scans", action: .increment(path("count"), by: 41)))
        #expect(second.reply["value"] == 42)
        // Integers stay integers on the wire.
        #expect(String(decoding: second.push, as: UTF8.self).contains(#""value":42"#))
        #expect(hub.state.record(named: "stats/scans")?.dataBytes == Array(#"{"count":42}"#.utf8))

        // A missing path in an existing record starts at `by`, creating parents.
        try hub.write(Write(name: "stats/scans", action: .increment(path("by.day"), by: -3)))
        #expect(hub.state.record(named: "stats/scans")?.data["by"] == ["day": -3])
    }

    @Test func incrementDoublesAndOverflow() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "r", action: .increment(path("x"), by: 0.1)))
        let sum = try hub.write(Write(name: "r", action: .increment(path("x"), by: 0.2)))
        #expect(sum.reply["value"] == .number(JSONNumber(0.1 + 0.2)!))
        try hub.write(Write(name: "r", action: .set(["i": 2])))
        let mixed = try hub.write(Write(name: "r", action: .increment(path("i"), by: 0.5)))
        #expect(mixed.reply["value"] == 2.5)
        try hub.write(Write(name: "r", action: .set(["big": .number(JSONNumber(Int64.max))])))
        let over = try hub.write(Write(name: "r", action: .increment(path("big"), by: 1)))
        #expect(over.reply["value"]?.numberValue?.isInteger == false)
        #expect(over.reply["value"]?.numberValue?.doubleValue == 9.223372036854775807e18)
    }

    @Test func incrementRefusesNonNumbers() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "r", action: .set(["s": "3", "b": true, "n": .null, "o": [:], "a": [1]])))
        for key in ["s", "b", "n", "o", "a"] {
            let error = hub.error(Write(name: "r", action: .increment(path(key), by: 1)))
            #expect(error?.code == .notANumber, "\(key)")
        }
        // Through a scalar is a path that does not fit: bad_path.
        #expect(hub.error(Write(name: "r", action: .increment(path("s.x"), by: 1)))?.code == .badPath)
        // A sum beyond Double's range is not a number either.
        try hub.write(Write(name: "r", action: .set(["huge": 1.7e308])))
        #expect(hub.error(Write(name: "r", action: .increment(path("huge"), by: 1.7e308)))?.code == .notANumber)
    }

    // MARK: versions

    @Test func versionsAndRecreation() throws {
        let hub = EngineHarness()
        for expected in Int64(1)...4 {
            let change = try hub.write(Write(name: "v", action: .setPath(path("n"), .number(JSONNumber(expected)))))
            #expect(change.reply["version"] == .number(JSONNumber(expected)))
            #expect(hub.state.record(named: "v")?.version == expected)
        }
        let deleted = try hub.write(Write(name: "v", action: .delete))
        #expect(deleted.reply["version"] == 5)
        #expect(deleted.seq == 5)
        let recreated = try hub.write(Write(name: "v", action: .set(["again": true])))
        #expect(recreated.reply["version"] == 1)
        #expect(recreated.seq == 6)
        #expect(hub.state.record(named: "v")?.created == recreated.time)
        guard case .record(nil, _?, _) = recreated.target else {
            Issue.record("a recreated record has no before")
            return
        }
    }

    // MARK: conflicts

    @Test func baseVersionConflicts() throws {
        let hub = EngineHarness()
        // 0 = must not exist: creates.
        try hub.write(Write(name: "r", action: .set(["a": 1]), baseVersion: 0))
        let again = hub.error(Write(name: "r", action: .set(["a": 2]), baseVersion: 0))
        #expect(again?.code == .conflict)
        #expect(again?.details["version"] == 1)
        #expect(again?.details["data"] == ["a": 1])

        try hub.write(Write(name: "r", action: .merge(["b": 2]), baseVersion: 1))
        for action: Write.Action in [.set([:]), .setPath(path("a"), 0), .merge([:]), .delete, .deletePath(path("a")),
                                     .increment(path("a"), by: 1)] {
            let error = hub.error(Write(name: "r", action: action, baseVersion: 1))
            #expect(error?.code == .conflict, "\(action)")
            #expect(error?.details["version"] == 2)
            #expect(error?.details["data"] == ["a": 1, "b": 2])
        }
        try hub.write(Write(name: "r", action: .delete, baseVersion: 2))

        // Against a record that does not exist: version 0, no data.
        let missing = hub.error(Write(name: "r", action: .set([:]), baseVersion: 3))
        #expect(missing?.code == .conflict)
        #expect(missing?.details["version"] == 0)
        #expect(missing?.details["data"] == nil)
        #expect(missing?.message.isEmpty == false)
    }

    // MARK: size limit

    @Test func tooLarge() throws {
        let hub = EngineHarness(limits: EngineLimits(maxRecordBytes: 20))
        // {"s":"0123456789ab"} is exactly 20 bytes.
        try hub.write(Write(name: "r", action: .set(["s": "0123456789ab"])))
        let error = hub.error(Write(name: "r", action: .set(["s": "0123456789abc"])))
        #expect(error?.code == .tooLarge)
        #expect(error?.details["limit"] == 20)
        #expect(hub.error(Write(name: "r", action: .setPath(path("t"), 1)))?.code == .tooLarge)
        #expect(hub.error(Write(name: "r", action: .merge(["more": 1])))?.code == .tooLarge)
        #expect(hub.error(Write(name: "q", action: .increment(path("a_very_long_key_name"), by: 1)))?.code == .tooLarge)
        // Shrinking and deleting are always possible.
        try hub.write(Write(name: "r", action: .deletePath(path("s"))))
        try hub.write(Write(name: "r", action: .delete))
    }
}
