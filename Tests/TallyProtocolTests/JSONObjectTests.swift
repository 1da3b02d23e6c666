import Testing
@testable import TallyProtocol

@Suite("JSONObject and JSONNumber")
struct JSONObjectTests {
    @Test func keysAreUniqueAndSortedByUTF8Bytes() {
        let object: JSONObject = ["b": 1, "a": 2, "B": 3, "é": 4, "e\u{301}": 5, "e": 6, "": 7]
        // "é" is C3 A9; "e\u{301}" is 65 CC 81: distinct keys, byte order.
        #expect(object.keys == ["", "B", "a", "b", "e", "e\u{301}", "é"])
        #expect(object.count == 7)
        #expect(object.values == [7, 3, 2, 1, 6, 5, 4])
        #expect(object["é"] == 4)
        #expect(object["e\u{301}"] == 5)
    }

    @Test func subscriptSetsReplacesAndRemoves() {
        var object = JSONObject()
        #expect(object.isEmpty)
        object["qty"] = 1
        object["sku"] = "a"
        object["qty"] = 2
        #expect(object.count == 2)
        #expect(object["qty"] == 2)
        #expect(object["missing"] == nil)
        object["sku"] = nil
        #expect(object.keys == ["qty"])
        object["never"] = nil
        #expect(object.count == 1)
    }

    @Test func removeValueReturnsTheOldValue() {
        var object: JSONObject = ["a": 1, "b": 2]
        #expect(object.removeValue(forKey: "a") == 1)
        #expect(object.removeValue(forKey: "a") == nil)
        #expect(object.keys == ["b"])
    }

    @Test func initializersAgreeAndLaterPairsWin() {
        let fromPairs = JSONObject([("x", 1), ("y", 2), ("x", 3)])
        let fromDictionary = JSONObject(["y": 2, "x": 3])
        #expect(fromPairs == fromDictionary)
        #expect(fromPairs["x"] == 3)
        #expect(fromPairs.hashValue == fromDictionary.hashValue)
    }

    @Test func iterationIsInKeyOrder() {
        let object: JSONObject = ["c": 3, "a": 1, "b": 2]
        #expect(object.map(\.key) == ["a", "b", "c"])
        var seen: [String] = []
        for (key, _) in object { seen.append(key) }
        #expect(seen == ["a", "b", "c"])
    }

    @Test func manyKeysStaySortedAndFindable() {
        var object = JSONObject()
        for i in (0..<500).reversed() { object["k\(i)"] = .number(JSONNumber(i)) }
        #expect(object.count == 500)
        #expect(object.keys == object.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
        for i in 0..<500 { #expect(object["k\(i)"] == .number(JSONNumber(i))) }
    }

    @Test func numbersCompareByValue() {
        #expect(JSONNumber(1) == 1.0)
        #expect(JSONNumber(1).hashValue == JSONNumber(1.0 as Double)?.hashValue)
        #expect(JSONNumber(0) == -0.0)
        #expect(JSONNumber(0).hashValue == (-0.0 as JSONNumber).hashValue)
        #expect(JSONNumber(1) != 1.5)
        // Double(Int64.max) rounds to 2^63; exact comparison keeps them apart.
        #expect(JSONNumber(Int64.max) != JSONNumber(9.223372036854775808e18))
        #expect(JSONNumber(Int64.min) == JSONNumber(-9.223372036854775808e18))
        let set: Set<JSONValue> = [1, 1.0, 2]
        #expect(set.count == 2)
    }

    @Test func numbersRefuseNaNAndInfinity() {
        #expect(JSONNumber(Double.nan) == nil)
        #expect(JSONNumber(Double.infinity) == nil)
        #expect(JSONNumber(-Double.infinity) == nil)
        #expect(JSONNumber(Double.greatestFiniteMagnitude) != nil)
    }

    @Test func int64ValueIsExactOrNil() {
        #expect(JSONNumber(2.0 as Double)?.int64Value == 2)
        #expect(JSONNumber(2.5 as Double)?.int64Value == nil)
        #expect(JSONNumber(1e19 as Double)?.int64Value == nil)
        #expect(JSONNumber(42).doubleValue == 42)
    }

    @Test func valuesWithDifferentCasesDiffer() {
        let values: [JSONValue] = [.null, false, 0, "", [], [:]]
        for (i, a) in values.enumerated() {
            for (j, b) in values.enumerated() { #expect((a == b) == (i == j)) }
        }
        #expect(Set(values).count == values.count)
    }
}
