import Testing
@testable import TallyEngine
import TallyProtocol

private func query(_ values: [String], prefix: String = "orders/", own: Bool = false, limit: Int? = nil,
                   order: Query.Order? = nil) -> Query {
    Query(prefix: prefix, conditions: [Query.Condition(path: path("stage"), values: values.map { JSONValue.string($0).serialized() })],
          own: own, order: order, limit: limit)
}

private func member(_ name: String, updated: Int64) -> RecordState {
    RecordState(name: name, version: 1, seq: 1, created: 0, updated: updated, data: [:], dataBytes: Array("{}".utf8))
}

@Suite("Live queries")
struct LiveQueryTests {
    @Test func equalQueriesShareOneKeyWhateverTheOrderTheyWereWrittenIn() {
        let a = query(["ready", "received", "ready"])
        let b = query(["received", "ready"])
        #expect(a == b)
        #expect(a.key == b.key)
        #expect(a.description == #"{"prefix":"orders/","where":{"stage":["ready","received"]}}"#)
        #expect(a != query(["ready"]))
        #expect(query(["ready"], limit: 5) != query(["ready"], limit: 5, order: .updated))
    }

    @Test func ownIsResolvedPerUser() {
        let mine = query(["ready"], own: true)
        #expect(mine.restricted(to: "cleo") != mine.restricted(to: "carl"))
        #expect(mine.restricted(to: "cleo").matches(["stage": "ready", "owner": "cleo"]))
        #expect(!mine.restricted(to: "cleo").matches(["stage": "ready", "owner": "carl"]))
        #expect(!mine.restricted(to: "cleo").matches(["stage": "ready"]))
        #expect(mine.isRestricted(to: "anyone"))
        let byCondition = Query(prefix: "orders/", conditions: [
            Query.Condition(path: path("owner"), values: [JSONValue.string("cleo").serialized()]),
        ])
        #expect(byCondition.isRestricted(to: "cleo"))
        #expect(!byCondition.isRestricted(to: "carl"))
        #expect(!query(["ready"]).isRestricted(to: "cleo"))
    }

    @Test func valuesCompareByTheirJSONText() {
        let q = Query(prefix: "p/", conditions: [
            Query.Condition(path: path("n"), values: [JSONValue.number(2).serialized(), JSONValue.null.serialized()]),
            Query.Condition(path: path("lines[0].sku"), values: [JSONValue.string("A").serialized()]),
        ])
        #expect(q.matches(["n": 2, "lines": [["sku": "A"]]]))
        #expect(q.matches(["n": .null, "lines": [["sku": "A"]]]))
        #expect(!q.matches(["n": "2", "lines": [["sku": "A"]]]))
        #expect(!q.matches(["lines": [["sku": "A"]]]), "a missing value is not null")
        #expect(!q.matches(["n": 2, "lines": [["sku": "B"]]]))
    }

    @Test func theRegistryFindsQueriesByPrefixAndForgetsUnusedOnes() {
        let registry = Registry()
        let a = registry.makeSubscriber(), b = registry.makeSubscriber()
        let open = query(["received"])
        registry.add(.query(open), slot: a)
        registry.add(.query(query(["received"])), slot: b)
        registry.add(.query(query(["x"], prefix: "intake/")), slot: b)
        #expect(registry.registry.queries(concerning: "orders/1") == [open])
        #expect(registry.registry.queries(concerning: "intake/1").count == 1)
        #expect(registry.registry.queries(concerning: "items/1").isEmpty)
        #expect(registry.registry.subscribers(ofQuery: open).sorted() == [a, b])
        // Query subscribers get query messages, not the record's change push.
        #expect(registry.slots(recordChange("orders/1", before: nil, after: ["stage": "received"])) == [])
        registry.releaseSubscriber(b)
        #expect(registry.registry.subscribers(ofQuery: open) == [a])
        #expect(registry.registry.queries(concerning: "intake/1").isEmpty)
        registry.remove(.query(open), slot: a)
        #expect(registry.registry.queries(concerning: "orders/1").isEmpty)
        #expect(registry.count == 0)
    }

    @Test func aLimitedResultTakesNewerRecordsAndEvictsTheOldest() {
        var result = LimitedResult(limit: 3, newestFirst: true,
                                   records: [member("a", updated: 1), member("b", updated: 2), member("c", updated: 3),
                                             member("d", updated: 4)])
        #expect(result.members.map(\.name) == ["d", "c", "b"])
        #expect(result.apply(name: "e", updated: 5) == .entered(evicted: "b"))
        #expect(result.members.map(\.name) == ["e", "d", "c"])
        #expect(result.apply(name: "old", updated: 0) == .none, "older than every member of a full result")
        #expect(result.apply(name: "c", updated: 6) == .changed)
        #expect(result.members.map(\.name) == ["c", "e", "d"])
        #expect(result.apply(name: "zzz", updated: nil) == .none, "not a member and not matching")
        #expect(result.apply(name: "e", updated: nil) == .reread, "a member leaving a full result needs a read")
        var partial = LimitedResult(limit: 3, newestFirst: true, records: [member("a", updated: 1)])
        #expect(partial.apply(name: "b", updated: 2) == .entered(evicted: nil))
        #expect(partial.apply(name: "a", updated: nil) == .left, "not full: it held every match")
    }

    @Test func anOldestFirstMemberThatMovesToTheEndOfAFullResultIsReread() {
        var result = LimitedResult(limit: 2, newestFirst: false,
                                   records: [member("a", updated: 1), member("b", updated: 2)])
        #expect(result.apply(name: "a", updated: 9) == .reread)
        var notFull = LimitedResult(limit: 3, newestFirst: false,
                                    records: [member("a", updated: 1), member("b", updated: 2)])
        #expect(notFull.apply(name: "a", updated: 9) == .changed)
        #expect(notFull.members.map(\.name) == ["b", "a"])
    }

    @Test func replacingReportsWhoLeft() {
        var result = LimitedResult(limit: 2, newestFirst: true, records: [member("a", updated: 1), member("b", updated: 2)])
        #expect(result.replace(with: [member("b", updated: 2), member("c", updated: 3)]) == ["a"])
        #expect(result.members.map(\.name) == ["c", "b"])
    }

    @Test func indexesAnswerQueriesOnTheirPathUnderTheirPrefix() {
        let stage = RecordIndex(prefix: "orders/", path: path("stage"))
        let owner = RecordIndex(prefix: "orders/", path: path("owner"))
        #expect(stage.values(for: query(["ready"])) == [JSONValue.string("ready").serialized()])
        #expect(stage.values(for: query(["ready"], prefix: "orders/2026-")) != nil, "a narrower prefix")
        #expect(stage.values(for: query(["ready"], prefix: "order")) == nil, "a wider prefix")
        #expect(owner.values(for: query(["ready"])) == nil)
        #expect(owner.values(for: query(["ready"], own: true).restricted(to: "cleo"))
            == [JSONValue.string("cleo").serialized()])
        #expect(stage.value(of: member("orders/1", updated: 1)) == nil)
        var placed = member("orders/1", updated: 1)
        placed.data = ["stage": "ready"]
        #expect(stage.value(of: placed) == Array("\"ready\"".utf8))
    }
}
