import Testing
@testable import TallyProtocol

@Suite("JSONParser: rejected texts")
struct JSONParserRejectionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var bytes: [UInt8]
        var kind: JSONError.Kind
        var offset: Int
        init(_ text: String, _ kind: JSONError.Kind, _ offset: Int) {
            self.init(Array(text.utf8), kind, offset)
        }
        init(_ bytes: [UInt8], _ kind: JSONError.Kind, _ offset: Int) {
            self.bytes = bytes
            self.kind = kind
            self.offset = offset
        }
        var testDescription: String { String(decoding: bytes, as: UTF8.self).debugDescription }
    }

    static let syntax: [Case] = [
        Case("", .unexpectedEnd, 0),
        Case("   ", .unexpectedEnd, 3),
        Case("[1,]", .unexpectedByte, 3),
        Case(#"{"a":1,}"#, .unexpectedByte, 7),
        Case("[1 2]", .unexpectedByte, 3),
        Case(#"{"a" 1}"#, .unexpectedByte, 5),
        Case(#"{"a":1 "b":2}"#, .unexpectedByte, 7),
        Case("{1:2}", .unexpectedByte, 1),
        Case("{'a':1}", .unexpectedByte, 1),
        Case("[,1]", .unexpectedByte, 1),
        Case("// comment\n1", .unexpectedByte, 0),
        Case("[1]/* comment */", .trailingContent, 3),
        Case("1 2", .trailingContent, 2),
        Case("{}}", .trailingContent, 2),
        Case("tru", .unexpectedEnd, 3),
        Case("True", .unexpectedByte, 0),
        Case("nul1", .unexpectedByte, 3),
        Case("[", .unexpectedEnd, 1),
        Case("[1", .unexpectedEnd, 2),
        Case("{", .unexpectedEnd, 1),
        Case(#"{"a""#, .unexpectedEnd, 4),
        Case(#"{"a":"#, .unexpectedEnd, 5),
        Case("[1}", .unexpectedByte, 2),
        Case(#"{"a":1]"#, .unexpectedByte, 6),
        Case("\u{0C}1", .unexpectedByte, 0),  // form feed is not JSON whitespace
        Case("\u{A0}1", .unexpectedByte, 0),  // nor is NO-BREAK SPACE
        Case([0xEF, 0xBB, 0xBF, 0x31], .unexpectedByte, 0),  // a byte order mark
    ]

    static let numbers: [Case] = [
        Case("01", .invalidNumber, 0),
        Case("-01", .invalidNumber, 1),
        Case("[00]", .invalidNumber, 1),
        Case("+1", .unexpectedByte, 0),
        Case(".5", .unexpectedByte, 0),
        Case("1.", .invalidNumber, 2),
        Case("1.e5", .invalidNumber, 2),
        Case("1e", .invalidNumber, 2),
        Case("1e+", .invalidNumber, 3),
        Case("1E-x", .invalidNumber, 3),
        Case("-", .invalidNumber, 1),
        Case("-a", .invalidNumber, 1),
        Case("NaN", .unexpectedByte, 0),
        Case("Infinity", .unexpectedByte, 0),
        Case("-Infinity", .invalidNumber, 1),
        Case("0x10", .trailingContent, 1),
        Case("1e999", .numberOutOfRange, 0),
        Case("[-1e999]", .numberOutOfRange, 1),
        Case("1" + String(repeating: "0", count: 400), .numberOutOfRange, 0),
    ]

    static let strings: [Case] = [
        Case(#""abc"#, .unexpectedEnd, 4),
        Case("\"a\u{01}\"", .unescapedControlCharacter, 2),
        Case("\"a\nb\"", .unescapedControlCharacter, 2),
        Case("\"\t\"", .unescapedControlCharacter, 1),
        Case("\"\\u0041\u{1F}\"", .unescapedControlCharacter, 7),
        Case(#""\x""#, .invalidEscape, 1),
        Case(#""\'""#, .invalidEscape, 1),
        Case(#""ab\U0041""#, .invalidEscape, 3),
        Case(#""\u12G4""#, .invalidEscape, 5),
        Case(#""\u12"#, .unexpectedEnd, 5),
        Case(#""\"#, .unexpectedEnd, 2),
        Case(#""\uD800""#, .loneSurrogate, 1),
        Case(#""\uDC00""#, .loneSurrogate, 1),
        Case(#""ab\uDFFF\uD800""#, .loneSurrogate, 3),
        Case(#""\uD800\u0041""#, .loneSurrogate, 1),
        Case(#""\uD800x""#, .loneSurrogate, 1),
        Case(#""\uD83D\uD83D""#, .loneSurrogate, 1),
    ]

    static let utf8: [Case] = [
        Case([0x22, 0xC0, 0xAF, 0x22], .invalidUTF8, 1),  // overlong '/'
        Case([0x22, 0xC1, 0xBF, 0x22], .invalidUTF8, 1),  // overlong U+007F
        Case([0x22, 0xE0, 0x80, 0xAF, 0x22], .invalidUTF8, 2),  // overlong, three bytes
        Case([0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22], .invalidUTF8, 2),  // overlong, four bytes
        Case([0x22, 0xED, 0xA0, 0x80, 0x22], .invalidUTF8, 2),  // U+D800 encoded
        Case([0x22, 0xED, 0xBF, 0xBF, 0x22], .invalidUTF8, 2),  // U+DFFF encoded
        Case([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], .invalidUTF8, 2),  // U+110000
        Case([0x22, 0xF5, 0x80, 0x80, 0x80, 0x22], .invalidUTF8, 1),
        Case([0x22, 0xFF, 0x22], .invalidUTF8, 1),
        Case([0x22, 0x80, 0x22], .invalidUTF8, 1),  // lone continuation byte
        Case([0x22, 0x61, 0xC3, 0x22], .invalidUTF8, 3),  // truncated by the quote
        Case([0x22, 0xE2, 0x82, 0x41, 0x22], .invalidUTF8, 3),
        Case([0x22, 0xE2, 0x82], .invalidUTF8, 1),  // input ends inside a character
        Case([0x22, 0x5C, 0x6E, 0xC3, 0x28, 0x22], .invalidUTF8, 4),  // on the escaped-string path
        Case([0xFF], .unexpectedByte, 0),
    ]

    static let duplicates: [Case] = [
        Case(#"{"qty":1,"qty":2}"#, .duplicateKey, 9),
        Case(#"{"b":1,"a":2,"b":3}"#, .duplicateKey, 13),
        Case(#"{"a":1,"\u0061":2}"#, .duplicateKey, 7),
        Case(#"[{"x":{"y":1,"y":1}}]"#, .duplicateKey, 13),
    ]

    @Test(arguments: syntax + numbers + strings + utf8 + duplicates)
    func rejected(_ test: Case) throws {
        let error = try #require(parseError(test.bytes))
        #expect(error.kind == test.kind, "\(error)")
        #expect(error.offset == test.offset, "\(error)")
        #expect(error.message.hasSuffix("at byte \(test.offset)"), "\(error)")
    }

    @Test func messagesSayWhatToFix() throws {
        let member = try #require(parseError(#"{"qty":1,"sku":"a" "x":1}"#))
        #expect(member.message == "expected ',' or '}' after object member, found '\"' at byte 19")
        let duplicate = try #require(parseError(#"{"sku":"a","qty":1,"qty":2}"#))
        #expect(duplicate.message == #"duplicate key "qty" at byte 19"#)
        let zero = try #require(parseError("[01]"))
        #expect(zero.message == "leading zeros are not allowed in numbers at byte 1")
        let control = try #require(parseError("\"a\u{1}\""))
        #expect(control.message == "control character U+0001 must be escaped inside a string at byte 2")
        #expect(control.description.hasPrefix("JSON unescapedControlCharacter: "))
    }

    @Test func duplicateKeysAreReportedInTextOrder() throws {
        // "c" repeats first in the text even though "a" sorts first.
        let error = try #require(parseError(#"{"c":1,"a":1,"c":2,"a":2}"#))
        #expect(error.offset == 13)
        #expect(error.message.contains(#""c""#))
    }
}
