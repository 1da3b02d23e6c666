import Testing
import TallyProtocol

/// The estimates caches bound themselves with: glibc's rounding, Swift's
/// inline small strings and array headers.
@Suite("HeapFootprint")
struct HeapFootprintTests {
    @Test func allocationsRoundAsGlibcDoes() {
        #expect(HeapFootprint.allocation(1) == 32)
        #expect(HeapFootprint.allocation(24) == 32)
        #expect(HeapFootprint.allocation(25) == 48)
        #expect(HeapFootprint.allocation(100) == 112)
    }

    @Test func smallStringsLiveInline() {
        #expect(HeapFootprint.string("") == 0)
        #expect(HeapFootprint.string("fifteen bytes!!") == 0)
        #expect(HeapFootprint.string("sixteen bytes!!!") == HeapFootprint.allocation(32 + 17))
        #expect(HeapFootprint.string(String(repeating: "é", count: 100)) == HeapFootprint.allocation(32 + 201))
    }

    @Test func treesCountEveryContainerAndLongString() throws {
        #expect(JSONValue.number(JSONNumber(7)).heapBytes == 0)
        #expect(JSONValue.object([:]).heapBytes == 0)
        let parsed = try JSONValue.parse(Array(#"{"a":1,"long name of a member":"a long string value here","list":[1,2,{"x":null}]}"#.utf8))
        let object = try #require(parsed.objectValue)
        let list = try #require(object["list"]?.arrayValue)
        let inner = try #require(list[2].objectValue)
        let expected = object.heapBytes
        // The members array, two long strings, the list and the inner object.
        #expect(expected >= HeapFootprint.string("long name of a member") + HeapFootprint.string("a long string value here")
                + HeapFootprint.array(capacity: 3, stride: MemoryLayout<JSONValue>.stride) + inner.heapBytes
                + HeapFootprint.array(capacity: 3, stride: MemoryLayout<(String, JSONValue)>.stride))
        #expect(parsed.heapBytes == expected)
        // A bigger record holds more.
        var grown = object
        grown["more"] = .string(String(repeating: "z", count: 1000))
        #expect(JSONValue.object(grown).heapBytes > expected + 1000)
    }
}
