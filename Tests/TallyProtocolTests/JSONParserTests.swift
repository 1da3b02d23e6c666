import Testing
@testable import TallyProtocol

@Suite("JSONParser: accepted texts")
struct JSONParserTests {
    @Test func rfc8259ImageExample() throws {
        let value = try JSONValue.parse(RFC8259.image)
        let image = try #require(value["Image"]?.objectValue)
        #expect(image["Width"] == 800)
        #expect(image["Title"] == "View from 15th Floor")
        #expect(image["Animated"] == false)
        #expect(image["IDs"] == [116, 943, 234, 38793])
        #expect(image["Thumbnail"]?["Url"] == "http://www.example.com/image/481989943")
        #expect(image.keys == ["Animated", "Height", "IDs", "Thumbnail", "Title", "Width"])
    }

    @Test func rfc8259PlacesExample() throws {
        let value = try JSONValue.parse(RFC8259.places)
        let places = try #require(value.arrayValue)
        #expect(places.count == 2)
        #expect(places[0]["Latitude"] == 37.7668)
        #expect(places[1]["Longitude"] == -122.02602)
        #expect(places[1]["Zip"] == "94085")
        #expect(places[0]["Address"] == "")
    }

    static let smallTexts: [(String, JSONValue)] = [
        ("\"Hello world!\"", JSONValue.string("Hello world!")),
        ("42", 42),
        ("true", true),
        ("false", false),
        ("null", .null),
        (" \t\r\n[ ] \n", []),
        ("{}", [:]),
        ("[[],{},[[]]]", [[], [:], [[]]]),
        ("{\"a\" : [ 1 , {\"b\":null} ] }", ["a": [1, ["b": .null]]]),
    ]

    @Test(arguments: smallTexts)
    func rfc8259SmallTexts(text: String, expected: JSONValue) throws {
        #expect(try JSONValue.parse(text) == expected)
    }

    @Test func entryPointsAgree() throws {
        let text = "{\"a\":[1,\"x\"]}"
        let fromString = try JSONValue.parse(text)
        let fromBytes = try JSONValue.parse(Array(text.utf8))
        let fromBuffer = try Array(text.utf8).withUnsafeBytes { raw in
            try JSONValue.parse(raw)
        }
        #expect(fromString == fromBytes)
        #expect(fromBytes == fromBuffer)
    }

    // MARK: Numbers

    @Test func integersStayExact() throws {
        let zero = try #require(try JSONValue.parse("0").numberValue)
        #expect(zero.isInteger && zero.int64Value == 0)
        let max = try #require(try JSONValue.parse("9223372036854775807").numberValue)
        #expect(max.isInteger && max.int64Value == Int64.max)
        let min = try #require(try JSONValue.parse("-9223372036854775808").numberValue)
        #expect(min.isInteger && min.int64Value == Int64.min)
        #expect(try JSONValue.parse("-42") == -42)
    }

    @Test func integersBeyondInt64BecomeDouble() throws {
        let big = try #require(try JSONValue.parse("9223372036854775808").numberValue)
        #expect(!big.isInteger)
        #expect(big.doubleValue == 9_223_372_036_854_775_808.0)
        #expect(big != JSONNumber(Int64.max))
        #expect(big.int64Value == nil)
        let small = try #require(try JSONValue.parse("-9223372036854775809").numberValue)
        #expect(!small.isInteger)
        let huge = try #require(try JSONValue.parse("123456789012345678901234567890").numberValue)
        #expect(huge.doubleValue == 1.2345678901234568e29)
    }

    @Test func minusZeroKeepsItsSignAndEqualsZero() throws {
        let value = try #require(try JSONValue.parse("-0").numberValue)
        #expect(!value.isInteger)
        #expect(value.doubleValue.sign == .minus)
        #expect(value == JSONNumber(0))
        #expect(value.int64Value == 0)
    }

    static let doubles: [(String, Double)] = [
        ("1.5e3", 1500.0), ("1E2", 100.0), ("1e+2", 100.0), ("1e-2", 0.01), ("-0.5", -0.5),
        ("0.1", 0.1), ("1e300", 1e300), ("2.2250738585072014e-308", 2.2250738585072014e-308),
        ("1e-999", 0.0), ("10.0", 10.0),
    ]

    @Test(arguments: doubles)
    func fractionsAndExponentsAreDoubles(text: String, expected: Double) throws {
        let number = try #require(try JSONValue.parse(text).numberValue)
        #expect(!number.isInteger)
        #expect(number.doubleValue == expected)
    }

    @Test func fractionalDoubleEqualsTheSameInteger() throws {
        #expect(try JSONValue.parse("1.5e3") == 1500)
        #expect(try JSONValue.parse("[1.0]") == [1])
    }

    // MARK: Strings

    @Test func escapesDecode() throws {
        #expect(try JSONValue.parse(#""\"\\\/\b\f\n\r\t""#) == .string("\"\\/\u{8}\u{C}\n\r\t"))
        #expect(try JSONValue.parse(#""a\u0000b""#) == .string("a\u{0}b"))
        #expect(try JSONValue.parse(#""\u00e9\u00E9""#) == "éé")
        #expect(try JSONValue.parse(#""x\uFFFFy""#) == .string("x\u{FFFF}y"))
        #expect(try JSONValue.parse(#""pre \" post""#) == "pre \" post")
    }

    @Test func surrogatePairsCombine() throws {
        #expect(try JSONValue.parse(#""\uD83D\uDE00""#) == "😀")
        #expect(try JSONValue.parse(#""\ud83d\ude00!""#) == "😀!")
        #expect(try JSONValue.parse(#""\uDBFF\uDFFF""#) == .string("\u{10FFFF}"))
    }

    @Test func rawUTF8PassesThrough() throws {
        #expect(try JSONValue.parse("\"é😀中\u{7F}\"") == .string("é😀中\u{7F}"))
        #expect(try JSONValue.parse([0x22, 0xF4, 0x8F, 0xBF, 0xBF, 0x22]) == .string("\u{10FFFF}"))
        #expect(try JSONValue.parse([0x22, 0xEF, 0xBF, 0xBF, 0x22]) == .string("\u{FFFF}"))
    }

    @Test func stringsCompareByBytesNotCanonicalEquivalence() throws {
        let composed = try JSONValue.parse(#""\u00e9""#)
        let decomposed = try JSONValue.parse(#""e\u0301""#)
        #expect(composed != decomposed)
        let object = try JSONValue.parse(#"{"\u00e9":1,"e\u0301":2}"#)
        #expect(object.objectValue?.count == 2)
    }

    // MARK: Byte by byte

    /// Every proper prefix of a valid text is incomplete: the parser must say
    /// so at exactly the end of the input, never crash or accept it.
    @Test(arguments: [RFC8259.image, RFC8259.places, #"{"a":[true,false,null,"\u00e9\n",-1.5e-3]}"#])
    func everyPrefixFailsAtItsEnd(text: String) {
        let bytes = Array(text.utf8)
        for length in 0..<bytes.count {
            let error = parseError(Array(bytes[..<length]))
            #expect(error != nil, "prefix of \(length) bytes was accepted")
            guard let error else { continue }
            #expect(
                error.kind == .unexpectedEnd || error.kind == .invalidNumber,
                "prefix of \(length): \(error)")
            #expect(error.offset == length, "prefix of \(length): \(error)")
        }
    }

    /// Corrupting any single byte either still parses or fails inside the input.
    @Test func singleByteCorruptionsFailCleanly() {
        let bytes = Array(RFC8259.image.utf8)
        for index in bytes.indices {
            for replacement: UInt8 in [0x00, 0x22, 0x2C, 0x5C, 0x5D, 0x7B, 0x80, 0xFF] {
                var mutated = bytes
                mutated[index] = replacement
                if let error = parseError(mutated) {
                    #expect(error.offset <= mutated.count)
                    #expect(error.message.hasSuffix("at byte \(error.offset)"), "\(error)")
                }
            }
        }
    }
}
