/// Strings (RFC 8259 §7) and the UTF-8 check (RFC 3629 §4).
extension JSONParser {
    /// Parses a string whose opening quote is at `position`.
    ///
    /// Most strings on the wire have no escapes, so the first pass only
    /// validates: when it reaches the closing quote the string is built from
    /// the input bytes in one go. The first backslash switches to the slower
    /// path that decodes into `scratch`.
    mutating func parseString() throws(JSONError) -> String {
        let open = position
        position += 1
        let start = position
        while position < bytes.count {
            let byte = bytes[position]
            if byte == ASCII.quote {
                let length = position - start
                guard length <= limits.maxStringBytes else { throw stringTooLong(start) }
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
                position += 1
                return text
            } else if byte == ASCII.backslash {
                return try parseEscapedString(open: open, start: start)
            } else if byte < 0x20 {
                throw unescapedControl(byte)
            } else if byte < 0x80 {
                position += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        throw unterminated(open)
    }

    /// The slow path: `position` is at the first backslash; `start..<position` is plain text.
    private mutating func parseEscapedString(open: Int, start: Int) throws(JSONError) -> String {
        scratch.removeAll(keepingCapacity: true)
        var runStart = start
        while position < bytes.count {
            let byte = bytes[position]
            if byte == ASCII.quote {
                try flush(from: runStart, stringStart: start)
                position += 1
                return String(decoding: scratch, as: UTF8.self)
            } else if byte == ASCII.backslash {
                try flush(from: runStart, stringStart: start)
                try parseEscape()
                runStart = position
            } else if byte < 0x20 {
                throw unescapedControl(byte)
            } else if byte < 0x80 {
                position += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        throw unterminated(open)
    }

    /// Copies the unescaped run `runStart..<position` into `scratch`, enforcing the length limit.
    private mutating func flush(from runStart: Int, stringStart: Int) throws(JSONError) {
        guard scratch.count + (position - runStart) <= limits.maxStringBytes else {
            throw stringTooLong(stringStart)
        }
        scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[runStart..<position]))
    }

    /// RFC 8259 §7: `escape ( %x22 / %x5C / %x2F / %x62 / %x66 / %x6E / %x72 / %x74 / %x75 4HEXDIG )`.
    ///
    /// "To escape an extended character that is not in the Basic Multilingual
    /// Plane, the character is represented as a 12-character sequence,
    /// encoding the UTF-16 surrogate pair". A surrogate without its partner
    /// names no character (and a Swift `String` cannot hold one), so it is an
    /// error rather than a silent U+FFFD.
    private mutating func parseEscape() throws(JSONError) {
        let escapeStart = position
        guard position + 1 < bytes.count else {
            position += 1
            throw failure(.unexpectedEnd, "expected an escape character after '\\', but the input ended")
        }
        let code = bytes[position + 1]
        position += 2
        switch code {
        case ASCII.quote, ASCII.backslash, ASCII.slash: scratch.append(code)
        case ASCII.b: scratch.append(0x08)
        case ASCII.f: scratch.append(0x0C)
        case ASCII.n: scratch.append(0x0A)
        case ASCII.r: scratch.append(0x0D)
        case ASCII.t: scratch.append(0x09)
        case ASCII.u:
            let unit = try readHex4()
            var scalar = UInt32(unit)
            if (0xD800...0xDBFF).contains(unit) {
                guard position + 1 < bytes.count, bytes[position] == ASCII.backslash, bytes[position + 1] == ASCII.u
                else {
                    throw failure(
                        .loneSurrogate, "high surrogate \\u\(hex(unit)) is not followed by a \\u low surrogate",
                        at: escapeStart)
                }
                position += 2
                let low = try readHex4()
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw failure(
                        .loneSurrogate, "high surrogate \\u\(hex(unit)) is followed by \\u\(hex(low)), not a low surrogate",
                        at: escapeStart)
                }
                scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(unit) {
                throw failure(
                    .loneSurrogate, "low surrogate \\u\(hex(unit)) without a preceding high surrogate",
                    at: escapeStart)
            }
            appendUTF8(scalar)
        default:
            throw failure(
                .invalidEscape,
                "invalid escape '\\\(Self.describe(code))'; valid escapes are \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX",
                at: escapeStart)
        }
    }

    /// Reads the four hex digits of a `\u` escape (either case, RFC 8259 §7).
    private mutating func readHex4() throws(JSONError) -> UInt16 {
        var unit: UInt16 = 0
        for _ in 0..<4 {
            guard position < bytes.count else {
                throw failure(.unexpectedEnd, "expected four hex digits after '\\u', but the input ended")
            }
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case ASCII.zero...ASCII.nine: digit = byte - ASCII.zero
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default:
                throw failure(.invalidEscape, "expected four hex digits after '\\u', found \(describeNext())")
            }
            unit = unit << 4 | UInt16(digit)
            position += 1
        }
        return unit
    }

    private mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            scratch.append(0xC0 | UInt8(scalar >> 6))
            scratch.append(0x80 | UInt8(scalar & 0x3F))
        case 0x800..<0x10000:
            scratch.append(0xE0 | UInt8(scalar >> 12))
            scratch.append(0x80 | UInt8(scalar >> 6 & 0x3F))
            scratch.append(0x80 | UInt8(scalar & 0x3F))
        default:
            scratch.append(0xF0 | UInt8(scalar >> 18))
            scratch.append(0x80 | UInt8(scalar >> 12 & 0x3F))
            scratch.append(0x80 | UInt8(scalar >> 6 & 0x3F))
            scratch.append(0x80 | UInt8(scalar & 0x3F))
        }
    }

    /// Steps over one multi-byte UTF-8 sequence starting at `position`, or throws.
    ///
    /// The table is RFC 3629 §4's `UTF8-2` … `UTF8-4`: the narrowed second-byte
    /// ranges after E0, ED, F0 and F4 are what exclude overlong forms,
    /// UTF-16 surrogates (U+D800…U+DFFF) and code points above U+10FFFF;
    /// C0, C1 and F5…FF never start a sequence.
    mutating func skipUTF8Sequence() throws(JSONError) {
        let lead = bytes[position]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default:
            throw failure(.invalidUTF8, "invalid UTF-8: \(Self.describe(lead)) cannot start a character")
        }
        for i in 1..<length {
            let at = position + i
            guard at < bytes.count else {
                throw failure(.invalidUTF8, "invalid UTF-8: the input ends inside a character", at: position)
            }
            let byte = bytes[at]
            let (min, max) = i == 1 ? (low, high) : (0x80, 0xBF)
            guard byte >= min, byte <= max else {
                throw failure(
                    .invalidUTF8,
                    "invalid UTF-8: \(Self.describe(byte)) cannot follow \(Self.describe(lead)) (overlong, surrogate or truncated character)",
                    at: at)
            }
        }
        position += length
    }

    // MARK: Errors

    private func unescapedControl(_ byte: UInt8) -> JSONError {
        failure(
            .unescapedControlCharacter,
            "control character U+00\(hex(UInt16(byte)).suffix(2)) must be escaped inside a string")
    }

    private func unterminated(_ open: Int) -> JSONError {
        failure(.unexpectedEnd, "unterminated string that starts at byte \(open): expected '\"', but the input ended")
    }

    private func stringTooLong(_ start: Int) -> JSONError {
        failure(
            .stringLimitExceeded,
            "string longer than the limit of \(limits.maxStringBytes) bytes", at: start + limits.maxStringBytes)
    }

    private func hex(_ unit: UInt16) -> String {
        let digits = String(unit, radix: 16, uppercase: true)
        return String(repeating: "0", count: 4 - digits.count) + digits
    }
}
