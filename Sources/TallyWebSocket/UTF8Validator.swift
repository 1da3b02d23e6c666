/// An incremental UTF-8 validator: a small DFA fed any number of chunks.
///
/// RFC 6455 §8.1: "When an endpoint is to interpret a byte stream as UTF-8
/// but finds that the byte stream is not, in fact, a valid UTF-8 stream,
/// that endpoint MUST _Fail the WebSocket Connection_." Text messages arrive
/// in fragments, and a code point may be split between them, so validation
/// keeps one byte of state between chunks and reports the first bad byte as
/// soon as it is seen (autobahn's "fail fast" cases), not when the message
/// ends.
///
/// The automaton follows Unicode's table of well-formed byte sequences
/// (Unicode 15, Table 3-7), which excludes overlong forms (C0, C1, E0 80–9F,
/// F0 80–8F), surrogates (ED A0–BF) and code points above U+10FFFF
/// (F4 90–BF, F5–FF).
struct UTF8Validator {
    /// Current DFA state; `accept` between complete code points.
    private var state: UInt8 = UTF8Validator.accept

    init() {}

    /// Whether every byte so far formed complete, valid code points (an
    /// unfinished sequence at the end of a message is an error, §8.1).
    var isComplete: Bool { state == Self.accept }

    /// Feeds bytes; returns false at the first byte that cannot continue a
    /// valid sequence (and stays failed).
    mutating func consume(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if state == Self.reject { return false }
        guard let base = bytes.baseAddress else { return true }
        let count = bytes.count
        var index = 0
        var current = state
        Self.table.withUnsafeBufferPointer { table in
            while index < count {
                if current == Self.accept {
                    // ASCII fast path, eight bytes at a time: plain text is
                    // mostly ASCII and needs no table look-ups.
                    while index + 8 <= count,
                          base.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                        index += 8
                    }
                    // Single ASCII bytes between multi-byte characters skip
                    // the table too, keeping them off the DFA's dependency chain.
                    while index < count, base.load(fromByteOffset: index, as: UInt8.self) < 0x80 {
                        index += 1
                    }
                    if index == count { break }
                }
                let byte = base.load(fromByteOffset: index, as: UInt8.self)
                current = table[Int(current) &* Self.classCount &+ Int(table[Self.classOffset &+ Int(byte)])]
                if current == Self.reject { break }
                index += 1
            }
        }
        state = current
        return current != Self.reject
    }

    /// Validates a complete sequence (a close reason, for instance).
    static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var validator = UTF8Validator()
        return validator.consume(bytes) && validator.isComplete
    }

    static func isValid(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { isValid($0) }
    }

    // MARK: - The automaton

    private static let accept: UInt8 = 0
    private static let reject: UInt8 = 8
    private static let stateCount = 9
    private static let classCount = 12
    /// Byte classes start after the transition rows in `table`.
    private static let classOffset = stateCount * classCount

    /// Transition rows (`stateCount` × `classCount`) followed by the 256
    /// byte classes: one array so the hot loop touches a single buffer.
    ///
    /// Classes: 0 ASCII, 1 80–8F, 2 90–9F, 3 A0–BF, 4 never valid
    /// (C0 C1 F5–FF), 5 C2–DF, 6 E0, 7 E1–EC EE EF, 8 ED, 9 F0, 10 F1–F3,
    /// 11 F4.
    /// States: 0 accept, 1 one continuation byte left, 2 two left, 3 three
    /// left, 4 after E0 (needs A0–BF), 5 after ED (needs 80–9F), 6 after F0
    /// (needs 90–BF), 7 after F4 (needs 80–8F), 8 reject.
    private static let table: [UInt8] = {
        var rows = [UInt8](repeating: reject, count: stateCount * classCount)
        func set(_ state: UInt8, _ classes: [Int], _ next: UInt8) {
            for byteClass in classes { rows[Int(state) * classCount + byteClass] = next }
        }
        // From accept: a lead byte says how many continuation bytes follow.
        set(0, [0], 0)
        set(0, [5], 1)
        set(0, [7], 2)
        set(0, [6], 4)
        set(0, [8], 5)
        set(0, [10], 3)
        set(0, [9], 6)
        set(0, [11], 7)
        // Plain continuation bytes 80–BF.
        set(1, [1, 2, 3], 0)
        set(2, [1, 2, 3], 1)
        set(3, [1, 2, 3], 2)
        // Restricted second bytes.
        set(4, [3], 1)        // E0 A0–BF: no overlong three-byte forms
        set(5, [1, 2], 1)     // ED 80–9F: no surrogates
        set(6, [2, 3], 2)     // F0 90–BF: no overlong four-byte forms
        set(7, [1], 2)        // F4 80–8F: nothing above U+10FFFF

        var classes = [UInt8](repeating: 4, count: 256)
        for byte in 0x00...0x7F { classes[byte] = 0 }
        for byte in 0x80...0x8F { classes[byte] = 1 }
        for byte in 0x90...0x9F { classes[byte] = 2 }
        for byte in 0xA0...0xBF { classes[byte] = 3 }
        for byte in 0xC2...0xDF { classes[byte] = 5 }
        classes[0xE0] = 6
        for byte in 0xE1...0xEF { classes[byte] = 7 }
        classes[0xED] = 8
        classes[0xF0] = 9
        for byte in 0xF1...0xF3 { classes[byte] = 10 }
        classes[0xF4] = 11
        return rows + classes
    }()
}
