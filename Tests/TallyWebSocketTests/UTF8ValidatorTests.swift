import Testing
@testable import TallyWebSocket

/// The UTF-8 DFA against Unicode's well-formed byte sequences (Table 3-7).
@Suite struct UTF8ValidatorTests {
    static let valid: [[UInt8]] = [
        [],
        bytes("plain ASCII that is longer than sixteen bytes, for the fast path"),
        [0x7F],
        [0xC2, 0x80],                    // U+0080
        [0xDF, 0xBF],                    // U+07FF
        [0xE0, 0xA0, 0x80],              // U+0800
        [0xE2, 0x82, 0xAC],              // €
        [0xED, 0x9F, 0xBF],              // U+D7FF, just below the surrogates
        [0xEE, 0x80, 0x80],              // U+E000, just above them
        [0xEF, 0xBF, 0xBF],              // U+FFFF
        [0xF0, 0x90, 0x80, 0x80],        // U+10000
        [0xF0, 0x9D, 0x84, 0x9E],        // 𝄞
        [0xF4, 0x8F, 0xBF, 0xBF],        // U+10FFFF
        bytes("κόσμε, 日本語, and 🎉 mixed with ASCII 0123456789abcdef"),
    ]

    static let invalid: [[UInt8]] = [
        [0x80],                          // lone continuation byte
        [0xBF],
        [0xC0, 0x80],                    // overlong NUL
        [0xC1, 0xBF],                    // overlong
        [0xE0, 0x80, 0x80],              // overlong three-byte
        [0xE0, 0x9F, 0xBF],
        [0xED, 0xA0, 0x80],              // surrogate U+D800
        [0xED, 0xBF, 0xBF],              // surrogate U+DFFF
        [0xF0, 0x80, 0x80, 0x80],        // overlong four-byte
        [0xF0, 0x8F, 0xBF, 0xBF],
        [0xF4, 0x90, 0x80, 0x80],        // U+110000
        [0xF5, 0x80, 0x80, 0x80],
        [0xF8, 0x88, 0x80, 0x80, 0x80],  // five-byte form
        [0xFE], [0xFF],
        [0xCE, 0x41],                    // lead byte followed by ASCII
        [0xE2, 0x82],                    // truncated at the end
        [0xF0, 0x9D, 0x84],
        bytes("sixteen ASCII bytes.") + [0xC3],
    ]

    @Test(arguments: valid)
    func acceptsWellFormed(sequence: [UInt8]) {
        #expect(UTF8Validator.isValid(sequence))
    }

    @Test(arguments: invalid)
    func rejectsIllFormed(sequence: [UInt8]) {
        #expect(!UTF8Validator.isValid(sequence))
    }

    @Test func everySplitPointOfValidTextIsFine() {
        let text = bytes("a€𝄞é — ASCII run of some length — ✓🎉")
        for split in 0...text.count {
            var validator = UTF8Validator()
            let first = text[..<split].withUnsafeBytes { validator.consume($0) }
            let second = text[split...].withUnsafeBytes { validator.consume($0) }
            #expect(first && second && validator.isComplete, "split at \(split)")
        }
    }

    @Test func incompleteSequenceIsNotAnErrorUntilTheEnd() {
        var validator = UTF8Validator()
        #expect([UInt8]([0x41, 0xF0, 0x9D]).withUnsafeBytes { validator.consume($0) })
        #expect(!validator.isComplete)
        #expect([UInt8]([0x84, 0x9E]).withUnsafeBytes { validator.consume($0) })
        #expect(validator.isComplete)
    }

    @Test func failsAtTheFirstBadByteAndStaysFailed() {
        var validator = UTF8Validator()
        #expect([UInt8]([0x41, 0xE0]).withUnsafeBytes { validator.consume($0) })
        // 0x80 cannot follow E0: rejected now, not at the end of the message.
        #expect(![UInt8]([0x80]).withUnsafeBytes { validator.consume($0) })
        #expect(![UInt8]([0x41]).withUnsafeBytes { validator.consume($0) })
    }

    /// Differential check against the standard library on random bytes
    /// biased towards the interesting ranges.
    @Test func agreesWithTheStandardLibrary() {
        let interesting: [UInt8] = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                    0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> Int {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return Int(truncatingIfNeeded: state >> 1)
        }
        for _ in 0..<20_000 {
            let sequence = (0..<(next() % 7)).map { _ in interesting[next() % interesting.count] }
            let expected = String(validating: sequence, as: UTF8.self) != nil
            #expect(UTF8Validator.isValid(sequence) == expected, "\(sequence)")
        }
    }
}
