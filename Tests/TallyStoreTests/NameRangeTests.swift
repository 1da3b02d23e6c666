import Testing
@testable import TallyStore

@Suite struct NameRangeTests {
    @Test func upperBoundOfPrefix() {
        #expect(NameRange.upperBound(ofPrefix: []) == nil, "the empty prefix has no upper bound")
        #expect(NameRange.upperBound(ofPrefix: Array("a".utf8)) == Array("b".utf8))
        #expect(NameRange.upperBound(ofPrefix: Array("a/".utf8)) == Array("a0".utf8))
        #expect(NameRange.upperBound(ofPrefix: [0x61, 0xFF]) == [0x62], "trailing 0xFF bytes carry")
        #expect(NameRange.upperBound(ofPrefix: [0x61, 0xFF, 0xFF]) == [0x62])
        #expect(NameRange.upperBound(ofPrefix: [0xFF, 0xFF]) == nil)
        #expect(NameRange.upperBound(ofPrefix: [0x7F]) == [0x80])
    }

    @Test func afterMovesTheLowerBound() {
        #expect(NameRange(prefix: "a/", after: nil).lower == Array("a/".utf8))
        #expect(NameRange(prefix: "a/", after: "a/1").lower == Array("a/1".utf8) + [0], "just past `after`")
        #expect(NameRange(prefix: "a/", after: "0").lower == Array("a/".utf8), "an `after` below the prefix changes nothing")
        #expect(NameRange(prefix: "a/", after: "b").isEmpty)
        #expect(!NameRange(prefix: "", after: "zzz").isEmpty)
    }

    @Test func containment() {
        let range = NameRange(prefix: "a/", after: "a/1")
        #expect(!range.contains("a/1".utf8))
        #expect(range.contains("a/1\u{0}".utf8))
        #expect(range.contains("a/10".utf8))
        #expect(!range.contains("a0".utf8))
        #expect(range.isPastEnd("a0".utf8))
    }
}

@Suite struct ListEntriesCodecTests {
    @Test func roundTrip() throws {
        for entries in [[], [""], ["a", "bc"], [String(repeating: "é", count: 200), "\u{0}", "✓"]] {
            let bytes = ListEntriesCodec.encode(entries)
            let decoded = try bytes.withUnsafeBytes { raw throws(StoreError) in try ListEntriesCodec.decode(raw) }
            #expect(decoded == entries)
        }
        // 400 bytes of "é" need a two-byte length.
        #expect(ListEntriesCodec.encode([String(repeating: "é", count: 200)]).prefix(3) == [1, 0x90, 0x03])
    }

    @Test func corruptionIsAnError() {
        for bytes: [UInt8] in [[], [2], [1, 5, 0x61], [1, 0x80]] {
            #expect(throws: StoreError.self) {
                try bytes.withUnsafeBytes { raw throws(StoreError) in try ListEntriesCodec.decode(raw) }
            }
        }
    }
}
