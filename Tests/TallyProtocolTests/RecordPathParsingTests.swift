import Testing
@testable import TallyProtocol

@Suite("RecordPath: parsing, rendering, overlaps")
struct RecordPathParsingTests {
    struct Valid: CustomTestStringConvertible, Sendable {
        var text: String
        var segments: [RecordPath.Segment]
        init(_ text: String, _ segments: [RecordPath.Segment]) {
            self.text = text
            self.segments = segments
        }
        var testDescription: String { text.debugDescription }
    }

    static let valid: [Valid] = [
        Valid("stage", [.key("stage")]),
        Valid("a.b.c", [.key("a"), .key("b"), .key("c")]),
        Valid("items[2].qty", [.key("items"), .index(2), .key("qty")]),
        Valid("history[0]", [.key("history"), .index(0)]),
        Valid("[0].name", [.index(0), .key("name")]),
        Valid("[0]", [.index(0)]),
        Valid("m[1][20][300]", [.key("m"), .index(1), .index(20), .index(300)]),
        Valid("a[1000000]", [.key("a"), .index(1_000_000)]),
        Valid("a[10]", [.key("a"), .index(10)]),
        Valid("first name.é", [.key("first name"), .key("é")]),
        Valid("e\u{301}.x", [.key("e\u{301}"), .key("x")]),
        Valid("-1.0x", [.key("-1"), .key("0x")]),
        Valid("🙂[0]", [.key("🙂"), .index(0)]),
        Valid("a'b\"c\\d", [.key("a'b\"c\\d")]),
    ]

    @Test(arguments: valid)
    func parsesAndRoundTrips(_ valid: Valid) throws {
        let path = try RecordPath(parsing: valid.text)
        #expect(path.segments == valid.segments)
        #expect(path.description == valid.text)
        #expect(try RecordPath(parsing: path.description) == path)
    }

    struct Invalid: CustomTestStringConvertible, Sendable {
        var text: String
        var kind: RecordPathError.Kind
        var offset: Int
        init(_ text: String, _ kind: RecordPathError.Kind, _ offset: Int) {
            self.text = text
            self.kind = kind
            self.offset = offset
        }
        var testDescription: String { text.debugDescription }
    }

    static let invalid: [Invalid] = [
        Invalid("", .emptyPath, 0),
        Invalid(".a", .emptyKey, 0),
        Invalid("a.", .emptyKey, 2),
        Invalid("a..b", .emptyKey, 2),
        Invalid("a.[0]", .emptyKey, 2),
        Invalid("a[0].", .emptyKey, 5),
        Invalid("a[", .invalidIndex, 2),
        Invalid("a[1", .invalidIndex, 3),
        Invalid("a[]", .invalidIndex, 2),
        Invalid("a[-1]", .invalidIndex, 2),
        Invalid("a[+1]", .invalidIndex, 2),
        Invalid("a[01]", .invalidIndex, 2),
        Invalid("a[00]", .invalidIndex, 2),
        Invalid("a[x]", .invalidIndex, 2),
        Invalid("a[1x]", .invalidIndex, 3),
        Invalid("a[ 1]", .invalidIndex, 2),
        Invalid("a[١]", .invalidIndex, 2), // Arabic-Indic digit one
        Invalid("a[1000001]", .indexTooLarge, 2),
        Invalid("a[99999999999999999999999]", .indexTooLarge, 2),
        Invalid("a]", .unexpectedCharacter, 1),
        Invalid("]", .unexpectedCharacter, 0),
        Invalid("a.]", .unexpectedCharacter, 2),
        Invalid("a[0]b", .unexpectedCharacter, 4),
        Invalid("a[0]]", .unexpectedCharacter, 4),
        Invalid("a\u{0}b", .controlCharacter, 1),
        Invalid("a.b\nc", .controlCharacter, 3),
        Invalid("\u{7F}", .controlCharacter, 0),
        Invalid("x\u{85}", .controlCharacter, 1),
        // Offsets count scalars: "é" as e + U+0301 is two, so the dot is at 3.
        Invalid("e\u{301}..x", .emptyKey, 3),
        // A combining mark after a dot does not hide the dot.
        Invalid("a.\u{301}.", .emptyKey, 4),
    ]

    @Test(arguments: invalid)
    func rejects(_ invalid: Invalid) {
        #expect {
            _ = try RecordPath(parsing: invalid.text)
        } throws: { error in
            guard let error = error as? RecordPathError else { return false }
            return error.kind == invalid.kind && error.offset == invalid.offset
                && error.message.contains("at offset \(invalid.offset) in ")
        }
    }

    @Test func messageNamesProblemOffsetAndText() {
        #expect(throws: RecordPathError(kind: .emptyKey, offset: 2, message: #"empty key at offset 2 in "a..b""#)) {
            try RecordPath(parsing: "a..b")
        }
        #expect(throws: RecordPathError(kind: .invalidIndex, offset: 2,
                                        message: #"index with a leading zero at offset 2 in "a[01]""#)) {
            try RecordPath(parsing: "a[01]")
        }
    }

    @Test func byteLimit() throws {
        let atLimit = String(repeating: "k", count: RecordPath.maxBytes)
        #expect(try RecordPath(parsing: atLimit).segments == [.key(atLimit)])
        let over = atLimit + "k"
        #expect {
            try RecordPath(parsing: over)
        } throws: { error in
            let error = error as? RecordPathError
            return error?.kind == .pathTooLong && error?.offset == RecordPath.maxBytes
                && (error?.message.contains("…") ?? false)
        }
        // Multi-byte scalars: 512 two-byte "é" fit, 513 do not; the offset is in scalars.
        #expect(throws: Never.self) { try RecordPath(parsing: String(repeating: "é", count: 512)) }
        #expect {
            try RecordPath(parsing: String(repeating: "é", count: 513))
        } throws: { error in
            (error as? RecordPathError)?.offset == 512
        }
    }

    @Test func segmentLimit() throws {
        let keys32 = Array(repeating: "a", count: RecordPath.maxSegments).joined(separator: ".")
        #expect(try RecordPath(parsing: keys32).segments.count == 32)
        #expect {
            try RecordPath(parsing: keys32 + ".b")
        } throws: { error in
            let error = error as? RecordPathError
            return error?.kind == .tooManySegments && error?.offset == 64
        }
        let indexes33 = "a" + String(repeating: "[0]", count: 32)
        #expect {
            try RecordPath(parsing: indexes33)
        } throws: { error in
            let error = error as? RecordPathError
            return error?.kind == .tooManySegments && error?.offset == 1 + 31 * 3
        }
    }

    @Test func keysCompareByBytes() throws {
        let composed = try RecordPath(parsing: "é")
        let decomposed = try RecordPath(parsing: "e\u{301}")
        #expect(composed != decomposed)
        #expect(!composed.overlaps(decomposed))
        #expect(Set([composed, decomposed, try RecordPath(parsing: "é")]).count == 2)
        #expect(RecordPath.Segment.key("1") != .index(1))
    }

    struct Pair: CustomTestStringConvertible, Sendable {
        var a: String
        var b: String
        var aPrefixOfB: Bool
        var bPrefixOfA: Bool
        var testDescription: String { "\(a) / \(b)" }
    }

    static let pairs: [Pair] = [
        Pair(a: "items", b: "items[2].qty", aPrefixOfB: true, bPrefixOfA: false),
        Pair(a: "items[2]", b: "items[2].qty", aPrefixOfB: true, bPrefixOfA: false),
        Pair(a: "items[2].qty", b: "items[2].qty", aPrefixOfB: true, bPrefixOfA: true),
        Pair(a: "items[1]", b: "items[2].qty", aPrefixOfB: false, bPrefixOfA: false),
        Pair(a: "item", b: "items", aPrefixOfB: false, bPrefixOfA: false), // segment-wise, not textual
        Pair(a: "a.b", b: "a[0]", aPrefixOfB: false, bPrefixOfA: false),
        Pair(a: "stage", b: "history[0]", aPrefixOfB: false, bPrefixOfA: false),
        Pair(a: "[0]", b: "[0].name", aPrefixOfB: true, bPrefixOfA: false),
    ]

    @Test(arguments: pairs)
    func prefixAndOverlap(_ pair: Pair) throws {
        let a = try RecordPath(parsing: pair.a)
        let b = try RecordPath(parsing: pair.b)
        #expect(a.isPrefix(of: b) == pair.aPrefixOfB)
        #expect(b.isPrefix(of: a) == pair.bPrefixOfA)
        #expect(a.overlaps(b) == (pair.aPrefixOfB || pair.bPrefixOfA))
        #expect(a.overlaps(b) == b.overlaps(a))
    }
}
