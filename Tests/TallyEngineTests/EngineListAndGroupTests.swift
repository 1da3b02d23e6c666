import Testing
@testable import TallyEngine
import TallyProtocol

// Engine.apply on lists (PROTOCOL.md "List writes") and atomic groups
// ("write (atomic, several records)").

@Suite("Engine: list writes")
struct EngineListTests {
    @Test func addEntryCreatesAppendsAndInserts() throws {
        let hub = EngineHarness()
        let first = try hub.write(Write(name: "orders", action: .addEntry("orders/1", at: nil)))
        #expect(first.isList)
        #expect(hub.state.entries(named: "orders") == ["orders/1"])
        #expect(hub.state.list(named: "orders")?.version == 1)
        #expect(hub.state.list(named: "orders")?.created == first.time)
        #expect(first.reply == ["list": "orders", "version": 1, "seq": 1])
        let push = try pushObject(first)
        #expect(Set(push.keys) == ["op", "seq", "time", "list", "version", "kind", "entry", "index"])
        #expect(push["op"] == "change")
        #expect(push["list"] == "orders")
        #expect(push["kind"] == "addEntry")
        #expect(push["entry"] == "orders/1")
        #expect(push["index"] == 0)

        try hub.write(Write(name: "orders", action: .addEntry("orders/3", at: nil)))
        let inserted = try hub.write(Write(name: "orders", action: .addEntry("orders/2", at: 1)))
        #expect(try pushObject(inserted)["index"] == 1)
        try hub.write(Write(name: "orders", action: .addEntry("orders/0", at: 0)))
        // at == count appends.
        try hub.write(Write(name: "orders", action: .addEntry("orders/4", at: 4)))
        #expect(hub.state.entries(named: "orders") == ["orders/0", "orders/1", "orders/2", "orders/3", "orders/4"])
        #expect(hub.state.list(named: "orders")?.version == 5)
        #expect(hub.state.list(named: "orders")?.created == first.time)

        let past = hub.error(Write(name: "orders", action: .addEntry("x", at: 6)))
        #expect(past?.code == .badField)
        #expect(past?.details["field"] == "at")
        // A new list has 0 entries: only at 0 works.
        #expect(hub.error(Write(name: "fresh", action: .addEntry("x", at: 1)))?.code == .badField)
        try hub.write(Write(name: "fresh", action: .addEntry("x", at: 0)))
    }

    @Test func removeEntry() throws {
        let hub = EngineHarness()
        #expect(hub.error(Write(name: "l", action: .removeEntry("a", at: nil)))?.code == .notFound)
        try hub.write(Write(name: "l", action: .setEntries(["a", "b", "a", "c", "a"])))

        let all = try hub.write(Write(name: "l", action: .removeEntry("a", at: nil)))
        #expect(hub.state.entries(named: "l") == ["b", "c"])
        let push = try pushObject(all)
        #expect(Set(push.keys) == ["op", "seq", "time", "list", "version", "kind", "entry", "indexes"])
        #expect(push["kind"] == "removeEntry")
        #expect(push["entry"] == "a")
        #expect(push["indexes"] == [0, 2, 4])
        #expect(all.reply == ["list": "l", "version": 2, "seq": 2])

        #expect(hub.error(Write(name: "l", action: .removeEntry("a", at: nil)))?.code == .notFound)

        try hub.write(Write(name: "l", action: .setEntries(["x", "y", "x"])))
        let one = try hub.write(Write(name: "l", action: .removeEntry("x", at: 2)))
        #expect(try pushObject(one)["indexes"] == [2])
        #expect(hub.state.entries(named: "l") == ["x", "y"])
        // `at` must hold that very entry.
        #expect(hub.error(Write(name: "l", action: .removeEntry("x", at: 1)))?.code == .notFound)
        #expect(hub.error(Write(name: "l", action: .removeEntry("x", at: 2)))?.code == .notFound)
        #expect(hub.state.list(named: "l")?.version == 4)
        // Removing the last entry leaves an empty list, not a deleted one.
        try hub.write(Write(name: "l", action: .removeEntry("y", at: 1)))
        try hub.write(Write(name: "l", action: .removeEntry("x", at: nil)))
        #expect(hub.state.entries(named: "l") == [])
    }

    @Test func setEntriesAndDeleteList() throws {
        let hub = EngineHarness()
        #expect(hub.error(Write(name: "l", action: .deleteList))?.code == .notFound)
        let set = try hub.write(Write(name: "l", action: .setEntries(["b", "a", "b"])))
        #expect(hub.state.entries(named: "l") == ["b", "a", "b"])
        let push = try pushObject(set)
        #expect(Set(push.keys) == ["op", "seq", "time", "list", "version", "kind", "entries"])
        #expect(push["kind"] == "setEntries")
        #expect(push["entries"] == ["b", "a", "b"])

        let deleted = try hub.write(Write(name: "l", action: .deleteList))
        #expect(hub.state.list(named: "l") == nil)
        let deletePush = try pushObject(deleted)
        #expect(Set(deletePush.keys) == ["op", "seq", "time", "list", "version", "kind"])
        #expect(deletePush["kind"] == "delete")
        #expect(deletePush["version"] == 2)
        #expect(deleted.reply == ["list": "l", "version": 2, "seq": 2])
        guard case .list(_?, nil, .delete) = deleted.target else {
            Issue.record("a deleted list has no after")
            return
        }
        // Recreated: version 1 again.
        let again = try hub.write(Write(name: "l", action: .setEntries([])))
        #expect(again.reply["version"] == 1)
    }

    @Test func listsAndRecordsAreSeparateNamespaces() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "same", action: .set(["a": 1])))
        let list = try hub.write(Write(name: "same", action: .addEntry("x", at: nil)))
        #expect(list.reply["version"] == 1)
        #expect(hub.state.record(named: "same")?.version == 1)
        #expect(hub.state.list(named: "same")?.version == 1)
    }

    @Test func listConflictsCarryEntries() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "l", action: .setEntries(["a"]), baseVersion: 0))
        let error = hub.error(Write(name: "l", action: .addEntry("b", at: nil), baseVersion: 0))
        #expect(error?.code == .conflict)
        #expect(error?.details["version"] == 1)
        #expect(error?.details["entries"] == ["a"])
        #expect(error?.details["data"] == nil)
        let missing = hub.error(Write(name: "m", action: .setEntries([]), baseVersion: 2))
        #expect(missing?.details["version"] == 0)
        #expect(missing?.details["entries"] == nil)
        try hub.write(Write(name: "l", action: .deleteList, baseVersion: 1))
    }

    /// The limit bounds what one `setEntries` may carry; entries added one
    /// at a time have none (the 100,001st order was refused once).
    @Test func setEntriesIsBoundedAndAddEntryIsNot() throws {
        let hub = EngineHarness(limits: EngineLimits(maxListEntries: 2))
        try hub.write(Write(name: "l", action: .addEntry("a", at: nil)))
        try hub.write(Write(name: "l", action: .addEntry("b", at: nil)))
        try hub.write(Write(name: "l", action: .addEntry("c", at: nil)))
        #expect(hub.state.entries(named: "l") == ["a", "b", "c"])
        let full = hub.error(Write(name: "m", action: .setEntries(["a", "b", "c"])))
        #expect(full?.code == .tooLarge)
        #expect(full?.details["limit"] == 2)
        try hub.write(Write(name: "m", action: .setEntries(["a", "b"])))
    }

    @Test func entriesCompareByBytes() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "l", action: .setEntries(["\u{E9}"])))
        // "e\u{301}" is canonically equivalent to "\u{E9}" but another name
        // (the stores compare names bytewise, PROTOCOL.md counts bytes).
        // removeEntry compares entries by bytes.
        do {
            let error = hub.error(Write(name: "l", action: .removeEntry("e\u{301}", at: nil)))
            #expect(error?.code == .notFound)
            #expect(hub.state.entries(named: "l")?.map { Array($0.utf8) } == [[0xC3, 0xA9]])
        }
    }
}

@Suite("Engine: atomic groups")
struct EngineGroupTests {
    @Test func seqsAreConsecutiveFromFirstSeq() throws {
        let hub = EngineHarness()
        hub.headSeq = 40
        let changes = try hub.apply([
            Write(name: "items/a", action: .setPath(path("stock"), 4)),
            Write(name: "orders", action: .addEntry("orders/9", at: nil)),
            Write(name: "items/b", action: .set(["x": 1])),
        ], atomic: true)
        #expect(changes.map(\.seq) == [41, 42, 43])
        #expect(changes.map { $0.reply["seq"] } == [41, 42, 43])
        #expect(try changes.map { try pushObject($0)["seq"] } == [41, 42, 43])
        #expect(Set(changes.map(\.time)).count == 1)
        #expect(hub.state.record(named: "items/b")?.seq == 43)
        #expect(hub.state.list(named: "orders")?.seq == 42)
    }

    @Test func laterWritesSeeEarlierOnes() throws {
        let hub = EngineHarness()
        let changes = try hub.apply([
            Write(name: "r", action: .set(["n": 1]), baseVersion: 0),
            Write(name: "r", action: .increment(path("n"), by: 1), baseVersion: 1),
            Write(name: "r", action: .merge(["m": true]), baseVersion: 2),
            Write(name: "l", action: .addEntry("r", at: nil)),
            Write(name: "l", action: .removeEntry("r", at: 0)),
            Write(name: "r", action: .delete, baseVersion: 3),
            Write(name: "r", action: .set(["reborn": true]), baseVersion: 0),
        ], atomic: true)
        #expect(changes.map { $0.reply["version"] } == [1, 2, 3, 1, 2, 4, 1])
        #expect(changes[1].reply["value"] == 2)
        #expect(hub.state.record(named: "r")?.data == ["reborn": true])
        #expect(hub.state.record(named: "r")?.version == 1)
        #expect(hub.state.entries(named: "l") == [])
        // Each change's before is the previous one's after.
        guard case .record(let before, _, _) = changes[2].target,
              case .record(_, let after, _) = changes[1].target else {
            Issue.record("record changes expected")
            return
        }
        #expect(before == after)
        guard case .record(nil, _?, _) = changes[6].target else {
            Issue.record("the recreated record has no before")
            return
        }
    }

    @Test func failureInTheMiddleAppliesNothing() throws {
        let hub = EngineHarness()
        try hub.write(Write(name: "keep", action: .set(["v": 1])))
        let before = hub.state
        let error = hub.error([
            Write(name: "keep", action: .set(["v": 2])),
            Write(name: "new", action: .set([:])),
            Write(name: "missing", action: .merge(["x": 1])),
            Write(name: "never", action: .set([:])),
        ], atomic: true)
        #expect(error?.code == .notFound)
        #expect(error?.details["index"] == 2)
        #expect(hub.state == before)
        #expect(hub.state.record(named: "keep")?.data == ["v": 1])
        #expect(hub.state.record(named: "new") == nil)

        // Errors with members of their own keep them and gain the index.
        let conflict = hub.error([
            Write(name: "l", action: .addEntry("a", at: nil)),
            Write(name: "keep", action: .set([:]), baseVersion: 7),
        ], atomic: true)
        #expect(conflict?.code == .conflict)
        #expect(conflict?.details["index"] == 1)
        #expect(conflict?.details["version"] == 1)
        #expect(conflict?.details["data"] == ["v": 1])

        let badPath = hub.error([Write(name: "keep", action: .setPath(path("v.x"), 1))], atomic: true)
        #expect(badPath?.code == .badPath)
        #expect(badPath?.details["index"] == 0)
        #expect(badPath?.details["field"] != nil)

        // A failure that depends on an earlier write of the group.
        let dependent = hub.error([
            Write(name: "keep", action: .delete),
            Write(name: "keep", action: .merge(["v": 3])),
        ], atomic: true)
        #expect(dependent?.code == .notFound)
        #expect(dependent?.details["index"] == 1)
        #expect(hub.state == before)
    }

    @Test func singleWritesCarryNoIndex() {
        let hub = EngineHarness()
        let error = hub.error(Write(name: "missing", action: .delete))
        #expect(error?.code == .notFound)
        #expect(error?.details["index"] == nil)
        // The same write as a group of one does carry it.
        #expect(hub.error([Write(name: "missing", action: .delete)], atomic: true)?.details["index"] == 0)
    }

    @Test func groupsSeeNamesByBytes() throws {
        let hub = EngineHarness()
        // Two names that are canonically equivalent but different bytes are
        // two records to the store (ByteName, SQLite BINARY).
        // Inside a group, canonically equivalent names are still different records.
        do {
            let changes = try hub.apply([
                Write(name: "\u{E9}", action: .set(["a": 1])),
                Write(name: "e\u{301}", action: .set(["b": 2]), baseVersion: 0),
            ], atomic: true)
            #expect(changes.map { $0.reply["version"] } == [1, 1])
        }
    }
}

