import Testing
@testable import TallyProtocol

@Suite("JSON serializer")
struct JSONSerializerTests {
    @Test func rfc8259ImageSerializesCompactAndSorted() throws {
        let value = try JSONValue.parse(RFC8259.image)
        #expect(
            value.serializedString
                == #"{"Image":{"Animated":false,"Height":600,"IDs":[116,943,234,38793],"#
                + #""Thumbnail":{"Height":125,"Url":"http://www.example.com/image/481989943","Width":100},"#
                + #""Title":"View from 15th Floor","Width":800}}"#)
    }

    @Test func rfc8259PlacesSerializesNumbersShortest() throws {
        let value = try JSONValue.parse(RFC8259.places)
        let second = try #require(value.arrayValue?.last)
        #expect(
            second.serializedString
                == #"{"Address":"","City":"SUNNYVALE","Country":"US","Latitude":37.371991,"#
                + #""Longitude":-122.02602,"State":"CA","Zip":"94085","precision":"zip"}"#)
    }

    @Test func outputDoesNotDependOnInputKeyOrder() throws {
        let a = try JSONValue.parse(#"{"b":1,"a":{"d":[],"c":{}},"é":2,"Z":3}"#)
        let b = try JSONValue.parse(#" { "é" : 2 , "Z":3, "a" : { "c" : { } , "d" : [ ] } , "b" : 1 } "#)
        #expect(a == b)
        #expect(a.serialized() == b.serialized())
        #expect(a.serializedString == #"{"Z":3,"a":{"c":{},"d":[]},"b":1,"é":2}"#)
    }

    @Test(arguments: [
        RFC8259.image, RFC8259.places, "[]", "{}", "\"\"", "-0", "[0.1,1e300,-1e-300,5e-324]",
        #"{"s":"\u0000\u001f\"\\\/\b\f\n\r\t é😀\u007f\uD83D\uDE00"}"#,
        "[9223372036854775807,-9223372036854775808,9223372036854775808,1.7976931348623157e308]",
        #"[[[[{"a":[{"b":null}]}]]],true,false]"#,
    ])
    func roundTripsAreStable(text: String) throws {
        let value = try JSONValue.parse(text)
        let bytes = value.serialized()
        let again = try JSONValue.parse(bytes)
        #expect(again == value)
        #expect(again.serialized() == bytes)
    }

    @Test func stringsAreEscapedMinimally() {
        let value = JSONValue.string("\u{0}\u{1F}\"\\/\u{8}\u{C}\n\r\t é😀\u{7F}")
        #expect(value.serializedString == #""\u0000\u001f\"\\/\b\f\n\r\t é😀"# + "\u{7F}\"")
        #expect(JSONValue.string("\u{1B}[0m").serializedString == #""\u001b[0m""#)
        #expect(JSONValue.string("plain").serialized() == Array("\"plain\"".utf8))
    }

    @Test func keysAreEscapedToo() {
        let value: JSONValue = ["a\"b": 1, "\n": 2]
        #expect(value.serializedString == #"{"\n":2,"a\"b":1}"#)
    }

    static let scalarCases: [(JSONValue, String)] = [
        (JSONValue.number(JSONNumber(0)), "0"),
        (.number(JSONNumber(Int64.min)), "-9223372036854775808"),
        (.number(JSONNumber(Int64.max)), "9223372036854775807"),
        (-17, "-17"),
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (1e300, "1e+300"),
        (1e-5, "1e-05"),
        (1500.0, "1500.0"),
        (.null, "null"),
        (true, "true"),
        (false, "false"),
    ]

    @Test(arguments: scalarCases)
    func scalars(value: JSONValue, expected: String) throws {
        #expect(value.serializedString == expected)
        // Every number form Swift writes is valid JSON that reads back equal.
        #expect(try JSONValue.parse(expected) == value)
    }

    @Test func serializeIntoAppends() {
        var buffer = Array("prefix:".utf8)
        let value: JSONValue = ["op": "set", "v": [1, 2]]
        value.serialize(into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == #"prefix:{"op":"set","v":[1,2]}"#)
        #expect(value.description == #"{"op":"set","v":[1,2]}"#)
    }
}

@Suite("JSONValue.prettyString")
struct JSONPrettyTests {
    @Test func indentsMembersAndElementsAndKeepsEmptyContainersShort() throws {
        let value = try JSONValue.parse(#"{"a":[1,{"b":null}],"c":{},"d":[],"e":"x\"y"}"#)
        #expect(value.prettyString == """
            {
              "a": [
                1,
                {
                  "b": null
                }
              ],
              "c": {},
              "d": [],
              "e": "x\\"y"
            }
            """)
        #expect((3 as JSONValue).prettyString == "3")
    }
}
