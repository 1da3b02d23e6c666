import Testing
@testable import TallyProtocol

@Suite("JSONLimits")
struct JSONLimitsTests {
    @Test func nestingTenThousandDeepFailsWithTheDepthError() throws {
        for open in ["[", "{\"a\":"] {
            let text = String(repeating: open, count: 10_000)
            let error = try #require(parseError(text))
            #expect(error.kind == .depthLimitExceeded)
            #expect(error.offset == 64 * open.utf8.count)
            #expect(error.message.hasPrefix("nesting deeper than 64 levels"))
        }
    }

    @Test func nestingExactlyAtTheLimitParses() throws {
        let limit = JSONLimits().maxDepth
        let deepest = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        var value = try JSONValue.parse(deepest)
        for _ in 1..<limit { value = try #require(value.arrayValue?.first) }
        #expect(value == [])
        let tooDeep = "[" + deepest + "]"
        #expect(parseError(tooDeep)?.kind == .depthLimitExceeded)
    }

    @Test func aCustomDepthLimitAboveTheStackStillFailsCleanly() throws {
        // The parser keeps its own stack, so a huge limit costs heap, not thread stack.
        let depth = 200_000
        let text = String(repeating: "[", count: depth)
        let error = try #require(parseError(text, limits: JSONLimits(maxDepth: depth + 1)))
        #expect(error.kind == .unexpectedEnd)
        #expect(error.offset == depth)
    }

    @Test func tenMegabytesAgainstOneMebibyteFailsBeforeParsing() throws {
        var bytes: [UInt8] = [UInt8(ascii: "[")]
        bytes.reserveCapacity(10_000_002)
        for _ in 0..<5_000_000 { bytes.append(contentsOf: [0x30, 0x2C]) }
        bytes[bytes.count - 1] = UInt8(ascii: "]")
        let error = try #require(parseError(bytes))
        #expect(error.kind == .inputLimitExceeded)
        #expect(error.offset == 1 << 20)
        #expect(error.message == "input of \(bytes.count) bytes is larger than the limit of 1048576 bytes")
    }

    @Test func inputExactlyAtTheLimitParses() throws {
        let text = "\"" + String(repeating: "x", count: 98) + "\""
        #expect(try JSONValue.parse(text, limits: JSONLimits(maxBytes: 100)).stringValue?.utf8.count == 98)
        #expect(parseError(text + " ", limits: JSONLimits(maxBytes: 100))?.kind == .inputLimitExceeded)
    }

    @Test func stringLimitCountsDecodedBytes() throws {
        let limits = JSONLimits(maxStringBytes: 4)
        #expect(try JSONValue.parse(#""abcd""#, limits: limits) == "abcd")
        #expect(try JSONValue.parse(#""\u0061bcd""#, limits: limits) == "abcd")
        #expect(try JSONValue.parse(#""éé""#, limits: limits) == "éé")
        let plain = try #require(parseError(#""abcde""#, limits: limits))
        #expect(plain.kind == .stringLimitExceeded)
        #expect(plain.offset == 5)
        #expect(parseError(#""ab\u0063de""#, limits: limits)?.kind == .stringLimitExceeded)
        #expect(parseError(#"{"abcde":1}"#, limits: limits)?.kind == .stringLimitExceeded)
    }

    @Test func arrayAndObjectLimits() throws {
        let limits = JSONLimits(maxArrayElements: 3, maxObjectMembers: 2)
        #expect(try JSONValue.parse("[1,2,3]", limits: limits) == [1, 2, 3])
        let array = try #require(parseError("[1,2,3,4]", limits: limits))
        #expect(array.kind == .arrayLimitExceeded)
        #expect(array.offset == 7)
        #expect(try JSONValue.parse(#"{"a":1,"b":2}"#, limits: limits) == ["a": 1, "b": 2])
        let object = try #require(parseError(#"{"a":1,"b":2,"c":3}"#, limits: limits))
        #expect(object.kind == .objectLimitExceeded)
        #expect(object.offset == 13)
        // Limits apply per container, not to the document.
        #expect(try JSONValue.parse("[[1,2,3],[1,2,3],[1,2,3]]", limits: limits).arrayValue?.count == 3)
    }
}
