import Testing
@testable import TallyProtocol

private func path(_ text: String) throws(RecordPathError) -> RecordPath { try RecordPath(parsing: text) }

/// Runs `body` and returns its RecordPathError, or nil if it did not throw.
private func pathError(_ body: () throws(RecordPathError) -> JSONValue) -> RecordPathError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

@Suite("RecordPath: operations on JSONValue")
struct RecordPathOperationsTests {
    static let order: JSONValue = [
        "stage": "open",
        "items": [["sku": "a", "qty": 1], ["sku": "b", "qty": 2], ["sku": "c", "qty": "three"]],
        "meta": ["count": 9_223_372_036_854_775_806, "ratio": 0.5, "flag": true, "none": .null],
    ]

    // MARK: value(at:)

    @Test func valueAtFindsAndMisses() throws {
        let order = Self.order
        #expect(order.value(at: try path("stage")) == "open")
        #expect(order.value(at: try path("items[1].qty")) == 2)
        #expect(order.value(at: try path("items[2]")) == ["sku": "c", "qty": "three"])
        #expect(order.value(at: try path("meta.none")) == .null) // present null is not absent
        #expect(order.value(at: try path("missing")) == nil)
        #expect(order.value(at: try path("items[3]")) == nil)
        #expect(order.value(at: try path("stage.x")) == nil)       // through a string
        #expect(order.value(at: try path("items.x")) == nil)       // key into an array
        #expect(order.value(at: try path("meta[0]")) == nil)       // index into an object
        let list: JSONValue = [["name": "x"]]
        #expect(list.value(at: try path("[0].name")) == "x")       // reading accepts any root
    }

    // MARK: setting

    @Test func settingReplacesAndLeavesTheOriginalAlone() throws {
        let order = Self.order
        let updated = try order.setting("closed", at: path("stage"))
        #expect(updated.value(at: try path("stage")) == "closed")
        #expect(order.value(at: try path("stage")) == "open")
        let qty = try order.setting(5, at: path("items[0].qty"))
        #expect(qty.value(at: try path("items[0]")) == ["sku": "a", "qty": 5])
        #expect(qty.value(at: try path("items[1]")) == order.value(at: try path("items[1]")))
    }

    @Test func settingCreatesIntermediateObjects() throws {
        let empty: JSONValue = [:]
        #expect(try empty.setting(1, at: path("a.b.c")) == ["a": ["b": ["c": 1]]])
        let partial: JSONValue = ["a": ["x": true]]
        #expect(try partial.setting(1, at: path("a.b.c")) == ["a": ["x": true, "b": ["c": 1]]])
    }

    @Test func settingAppendsAtCount() throws {
        let order = Self.order
        let appended = try order.setting(["sku": "d"], at: path("items[3]"))
        #expect(appended.value(at: try path("items"))?.arrayValue?.count == 4)
        #expect(appended.value(at: try path("items[3].sku")) == "d")
        // Appending through a key creates the element as an object.
        let deep = try order.setting(7, at: path("items[3].qty"))
        #expect(deep.value(at: try path("items[3]")) == ["qty": 7])
        let nested: JSONValue = ["m": [[]]]
        #expect(try nested.setting(1, at: path("m[0][0]")) == ["m": [[1]]])
    }

    @Test func settingPastTheEndSaysWhereToAppend() throws {
        let error = pathError { () throws(RecordPathError) in try Self.order.setting(1, at: path("items[5]")) }
        #expect(error?.kind == .indexPastEnd)
        #expect(error?.offset == nil)
        #expect(error?.message == "cannot set items[5]: index 5 is past the end of items (3 elements); use 3 to append")
        let one: JSONValue = ["l": [0]]
        #expect(pathError { () throws(RecordPathError) in try one.setting(1, at: path("l[2]")) }?.message
            == "cannot set l[2]: index 2 is past the end of l (1 element); use 1 to append")
    }

    @Test func settingThroughTheWrongKindNamesPrefixAndType() throws {
        let record: JSONValue = ["a": 3, "s": "x", "o": ["k": 1], "l": [1]]
        let cases: [(String, RecordPathError.Kind, String)] = [
            ("a.b", .notAContainer, "cannot set a.b: a holds a number, not an object"),
            ("a.b.c", .notAContainer, "cannot set a.b.c: a holds a number, not an object"),
            ("l.x", .notAContainer, "cannot set l.x: l holds an array, not an object"),
            ("l[0].x", .notAContainer, "cannot set l[0].x: l[0] holds a number, not an object"),
            ("o[0]", .notAContainer, "cannot set o[0]: o holds an object, not an array; an index needs an existing array"),
            ("s[0]", .notAContainer, "cannot set s[0]: s holds a string, not an array; an index needs an existing array"),
            ("new[0]", .notAContainer, "cannot set new[0]: new does not exist; an index needs an existing array"),
            ("[0]", .indexAtRoot, "cannot set [0]: a record is an object, so the path must start with a key"),
        ]
        for (text, kind, message) in cases {
            let error = pathError { () throws(RecordPathError) in try record.setting(1, at: path(text)) }
            #expect(error?.kind == kind, "\(text)")
            #expect(error?.message == message, "\(text)")
        }
        #expect(pathError { () throws(RecordPathError) in try JSONValue.array([]).setting(1, at: path("a")) }?.message
            == "cannot set a: the record is an array, but records are JSON objects")
    }

    // MARK: removing

    @Test func removingKeysAndShiftingElements() throws {
        let order = Self.order
        let noStage = try order.removing(at: path("stage"))
        #expect(noStage.value(at: try path("stage")) == nil)
        #expect(noStage.objectValue?.keys == ["items", "meta"])
        let shifted = try order.removing(at: path("items[0]"))
        #expect(shifted.value(at: try path("items")) == [["sku": "b", "qty": 2], ["sku": "c", "qty": "three"]])
        let inner = try order.removing(at: path("items[1].qty"))
        #expect(inner.value(at: try path("items[1]")) == ["sku": "b"])
        let noNull = try order.removing(at: path("meta.none"))
        #expect(noNull.value(at: try path("meta"))?.objectValue?.keys == ["count", "flag", "ratio"])
    }

    @Test(arguments: ["missing", "missing.deeper", "items[3]", "items[9].qty", "stage.x", "stage[0]",
                      "items.x", "meta[0]", "meta.flag.x", "items[0].qty.x"])
    func removingAbsentOrThroughScalarIsANoOp(_ text: String) throws {
        #expect(try Self.order.removing(at: path(text)) == Self.order)
    }

    @Test func removingNeedsARecord() throws {
        #expect(pathError { () throws(RecordPathError) in try Self.order.removing(at: path("[0]")) }?.kind == .indexAtRoot)
        #expect(pathError { () throws(RecordPathError) in try JSONValue.string("x").removing(at: path("a")) }?.kind
            == .rootNotObject)
    }

    // MARK: incrementing

    @Test func incrementingIntegersStaysExact() throws {
        let result = try Self.order.incrementing(at: path("items[1].qty"), by: 3)
        let qty = result.value(at: try path("items[1].qty"))?.numberValue
        #expect(qty == 5)
        #expect(qty?.isInteger == true)
        let negative = try Self.order.incrementing(at: path("items[0].qty"), by: -4)
        #expect(negative.value(at: try path("items[0].qty")) == -3)
        let big = try Self.order.incrementing(at: path("meta.count"), by: 1)
        #expect(big.value(at: try path("meta.count"))?.numberValue?.int64Value == Int64.max)
    }

    @Test func incrementingDoublesAndMixed() throws {
        let double = try Self.order.incrementing(at: path("meta.ratio"), by: 0.25)
        #expect(double.value(at: try path("meta.ratio")) == 0.75)
        let mixed = try Self.order.incrementing(at: path("items[0].qty"), by: 0.5)
        let qty = mixed.value(at: try path("items[0].qty"))?.numberValue
        #expect(qty?.doubleValue == 1.5)
        #expect(qty?.isInteger == false)
        let intOntoDouble = try Self.order.incrementing(at: path("meta.ratio"), by: 2)
        #expect(intOntoDouble.value(at: try path("meta.ratio"))?.numberValue?.isInteger == false)
        #expect(intOntoDouble.value(at: try path("meta.ratio")) == 2.5)
    }

    @Test func incrementingOverflowBecomesDouble() throws {
        let record: JSONValue = ["n": .number(JSONNumber(Int64.max)), "m": .number(JSONNumber(Int64.min))]
        let up = try record.incrementing(at: path("n"), by: 1).value(at: path("n"))?.numberValue
        #expect(up?.isInteger == false)
        #expect(up?.doubleValue == 9.223372036854775808e18)
        let down = try record.incrementing(at: path("m"), by: -1).value(at: path("m"))?.numberValue
        #expect(down?.isInteger == false)
        #expect(down?.doubleValue == -9.223372036854775808e18)
        let huge: JSONValue = ["d": 1e308]
        let error = pathError { () throws(RecordPathError) in try huge.incrementing(at: path("d"), by: 1e308) }
        #expect(error?.kind == .sumOutOfRange)
    }

    @Test func incrementingAbsentSetsTheAmount() throws {
        let empty: JSONValue = [:]
        #expect(try empty.incrementing(at: path("stats.views"), by: 1) == ["stats": ["views": 1]])
        let appended = try Self.order.incrementing(at: path("items[3].qty"), by: 2)
        #expect(appended.value(at: try path("items[3]")) == ["qty": 2])
        let past = pathError { () throws(RecordPathError) in try Self.order.incrementing(at: path("items[4].qty"), by: 1) }
        #expect(past?.kind == .indexPastEnd)
        #expect(past?.message.hasPrefix("cannot increment items[4].qty: index 4 is past the end of items") == true)
    }

    @Test func incrementingANonNumberSaysWhatItHolds() throws {
        let error = pathError { () throws(RecordPathError) in try Self.order.incrementing(at: path("items[2].qty"), by: 1) }
        #expect(error?.kind == .notANumber)
        #expect(error?.message == "cannot increment items[2].qty: it holds a string")
        for (text, kind) in [("meta.flag", "a boolean"), ("meta.none", "null"), ("items", "an array"), ("meta", "an object")] {
            let error = pathError { () throws(RecordPathError) in try Self.order.incrementing(at: path(text), by: 1) }
            #expect(error?.message == "cannot increment \(text): it holds \(kind)")
        }
        let through = pathError { () throws(RecordPathError) in try Self.order.incrementing(at: path("stage.count"), by: 1) }
        #expect(through?.message == "cannot increment stage.count: stage holds a string, not an object")
    }
}
