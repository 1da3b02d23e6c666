import Testing
@testable import TallyProtocol

// MessageWriter builds the hub's messages straight into bytes; whatever it
// writes must be one valid JSON object that JSONValue.parse reads back, with
// the members in the order written.

private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

private func parsedObject(_ bytes: [UInt8]) throws -> JSONObject {
    guard case .object(let object) = try JSONValue.parse(bytes) else {
        throw ProtocolError(.badJSON, "not an object: \(text(bytes))")
    }
    return object
}

@Suite("MessageWriter: server messages as bytes")
struct MessageWriterTests {
    @Test func emptyObject() throws {
        let writer = MessageWriter()
        let bytes = writer.finish()
        #expect(text(bytes) == "{}")
        #expect(try JSONValue.parse(bytes) == [:])
    }

    @Test func membersInWrittenOrder() throws {
        var writer = MessageWriter(capacity: 8)
        writer.string("op", "change")
        writer.int("seq", 58)
        writer.int("time", -1)
        writer.bool("ok", true)
        writer.bool("more", false)
        writer.value("data", ["stage": "ready", "n": [1, 2.5, .null]])
        writer.null("record")
        let bytes = writer.finish()
        #expect(text(bytes) == #"{"op":"change","seq":58,"time":-1,"ok":true,"more":false,"data":{"n":[1,2.5,null],"stage":"ready"},"record":null}"#)
        let object = try parsedObject(bytes)
        #expect(object["op"] == "change")
        #expect(object["seq"] == 58)
        #expect(object["ok"] == true)
        #expect(object["more"] == false)
        #expect(object["record"] == .null)
        #expect(object["data"] == ["stage": "ready", "n": [1, 2.5, .null]])
    }

    @Test func extremeIntegers() throws {
        var writer = MessageWriter()
        writer.int("max", .max)
        writer.int("min", .min)
        writer.int("zero", 0)
        let object = try parsedObject(writer.finish())
        #expect(object["max"] == .number(JSONNumber(Int64.max)))
        #expect(object["min"] == .number(JSONNumber(Int64.min)))
        #expect(object["zero"] == 0)
    }

    @Test(arguments: [
        "", "plain", "quote \" and backslash \\", "slash / stays", "line\nbreak\ttab\r", "\u{0}\u{1}\u{1F}\u{7F}",
        "é e\u{301} 名前 🙂", "\u{2028}\u{2029}", "\u{FEFF}bom", "{\"not\":\"an object\"}",
    ])
    func stringsAreEscaped(_ value: String) throws {
        var writer = MessageWriter()
        writer.string("name", value)
        writer.value("nested", ["k\"ey\n": .string(value)])
        let bytes = writer.finish()
        let object = try parsedObject(bytes)
        // Byte-exact: canonically equivalent strings must not be confused.
        #expect(object["name"]?.stringValue.map { Array($0.utf8) } == Array(value.utf8))
        #expect(object["nested"]?["k\"ey\n"]?.stringValue.map { Array($0.utf8) } == Array(value.utf8))
        // No raw control characters reach the wire.
        #expect(!bytes.contains { $0 < 0x20 })
    }

    @Test func rawMembersAreCopiedVerbatim() throws {
        let data: JSONValue = ["b": 1, "a": ["x", "y"], "c": ["d": .null]]
        let serialized = data.serialized()
        var writer = MessageWriter()
        writer.string("name", "orders/42")
        writer.raw("data", serialized)
        writer.raw("n", Array("1.5e3".utf8))
        let bytes = writer.finish()
        #expect(text(bytes) == #"{"name":"orders/42","data":"# + text(serialized) + #","n":1.5e3}"#)
        let object = try parsedObject(bytes)
        #expect(object["data"] == data)
        #expect(object["n"] == 1500.0)
    }

    @Test func rawArrays() throws {
        var writer = MessageWriter()
        writer.rawArray("none", [])
        writer.rawArray("one", [Array(#"{"op":"change","seq":1}"#.utf8)])
        writer.rawArray("three", [Array("1".utf8), Array(#""two""#.utf8), Array("[3]".utf8)])
        let bytes = writer.finish()
        #expect(text(bytes) == #"{"none":[],"one":[{"op":"change","seq":1}],"three":[1,"two",[3]]}"#)
        let object = try parsedObject(bytes)
        #expect(object["none"] == [])
        #expect(object["one"] == [["op": "change", "seq": 1]])
        #expect(object["three"] == [1, "two", [3]])
    }

    @Test func membersOfAnObject() throws {
        var writer = MessageWriter()
        writer.bool("ok", false)
        writer.members(of: [:])
        writer.members(of: ["version": 4, "name": "orders/42", "we\"ird": .null])
        writer.int("after", 1)
        let bytes = writer.finish()
        // JSONObject keeps its members in byte order of their names.
        #expect(text(bytes) == #"{"ok":false,"name":"orders/42","version":4,"we\"ird":null,"after":1}"#)
        let object = try parsedObject(bytes)
        #expect(object.count == 5)
        #expect(object["we\"ird"] == .null)

        var only = MessageWriter()
        only.members(of: ["a": 1])
        #expect(text(only.finish()) == #"{"a":1}"#)
    }

    @Test func errorReplyShape() throws {
        let error = ProtocolError(.conflict, "\"a\" is at version 3, not 2",
                                  details: ["name": "a", "version": 3, "data": ["x": 1]])
        var writer = MessageWriter()
        writer.value("id", "req\"1")
        writer.bool("ok", false)
        writer.value("error", error.json)
        let object = try parsedObject(writer.finish())
        #expect(object["id"] == "req\"1")
        #expect(object["error"]?["code"] == "conflict")
        #expect(object["error"]?["message"] == .string(error.message))
        #expect(object["error"]?["data"] == ["x": 1])
    }
}
