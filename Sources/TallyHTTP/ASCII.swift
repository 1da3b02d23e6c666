/// Byte classes and case-insensitive comparisons from the HTTP grammar.
///
/// HTTP/1.1 framing is defined over octets, not characters (RFC 9112 §2.2:
/// "a recipient MUST parse an HTTP message as a sequence of octets in an
/// encoding that is a superset of US-ASCII"), so the parser classifies bytes
/// and only builds Strings once a token or value is complete.
enum ASCII {
    static let tab: UInt8 = 0x09
    static let lf: UInt8 = 0x0A
    static let cr: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let comma: UInt8 = 0x2C
    static let colon: UInt8 = 0x3A
    static let semicolon: UInt8 = 0x3B
    static let percent: UInt8 = 0x25
    static let slash: UInt8 = 0x2F
    static let question: UInt8 = 0x3F
    static let hash: UInt8 = 0x23

    /// `tchar` from RFC 9110 §5.6.2: the characters of methods and field names.
    @inline(__always)
    static func isTokenChar(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A:
            return true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E:
            return true
        default:
            return false
        }
    }

    /// A byte of a request-target. RFC 9112 §3.2 builds targets from URI
    /// characters (RFC 3986), all visible ASCII. We accept every VCHAR except
    /// `#` (a fragment is never sent, RFC 9110 §7.1): rejecting the few
    /// visible characters RFC 3986 leaves out (`"<>\^`{|}`) would break
    /// sloppy clients for no safety gain, since the path is decoded anyway.
    @inline(__always)
    static func isTargetChar(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && byte != hash
    }

    /// A byte allowed inside a field value: `field-vchar`, SP and HTAB
    /// (RFC 9110 §5.5). obs-text (0x80–0xFF) is allowed by the grammar;
    /// CR, LF, NUL and the other controls are not ("Field values containing
    /// CR, LF, or NUL characters are invalid and dangerous").
    @inline(__always)
    static func isFieldValueChar(_ byte: UInt8) -> Bool {
        byte >= 0x20 ? byte != 0x7F : byte == tab
    }

    /// Optional whitespace, `OWS = *( SP / HTAB )` (RFC 9110 §5.6.3).
    @inline(__always)
    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == space || byte == tab
    }

    @inline(__always)
    static func isDigit(_ byte: UInt8) -> Bool {
        byte >= 0x30 && byte <= 0x39
    }

    /// The value of a hexadecimal digit, or nil.
    @inline(__always)
    static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case 0x30...0x39: return Int(byte - 0x30)
        case 0x41...0x46: return Int(byte - 0x41 + 10)
        case 0x61...0x66: return Int(byte - 0x61 + 10)
        default: return nil
        }
    }

    @inline(__always)
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    /// Whether two byte strings are equal ignoring ASCII case: field names
    /// are case-insensitive (RFC 9110 §5.1), as are connection options and
    /// transfer-coding names. Non-ASCII bytes must match exactly.
    ///
    /// Comparisons run over contiguous UTF-8 (what native Strings store), so
    /// no Character is ever formed and nothing is allocated.
    @inline(__always)
    static func equalsIgnoringCase(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        for index in 0..<a.count where a[index] != b[index] && lowercased(a[index]) != lowercased(b[index]) {
            return false
        }
        return true
    }

    @inline(__always)
    static func equalsIgnoringCase(_ a: UnsafeBufferPointer<UInt8>, _ b: StaticString) -> Bool {
        equalsIgnoringCase(a, UnsafeBufferPointer(start: b.utf8Start, count: b.utf8CodeUnitCount))
    }

    static func equalsIgnoringCase(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        return withUTF8(a) { a in withUTF8(b) { b in equalsIgnoringCase(a, b) } }
    }

    static func equalsIgnoringCase(_ a: String, _ b: StaticString) -> Bool {
        guard a.utf8.count == b.utf8CodeUnitCount else { return false }
        return withUTF8(a) { equalsIgnoringCase($0, b) }
    }

    /// Calls `body` with the UTF-8 of `text`, contiguous.
    @inline(__always)
    static func withUTF8<R>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(text.utf8).withUnsafeBufferPointer(body)
    }

    /// Calls `body` with each element of a comma-separated list
    /// (`#element`, RFC 9110 §5.6.1), OWS trimmed, empty elements skipped.
    /// Stops early and returns true as soon as `body` returns true.
    @inline(__always)
    static func anyListElement(_ bytes: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> Bool) -> Bool {
        var start = 0
        while start < bytes.count {
            var end = start
            while end < bytes.count && bytes[end] != comma { end += 1 }
            var first = start, last = end
            while first < last && isWhitespace(bytes[first]) { first += 1 }
            while last > first && isWhitespace(bytes[last - 1]) { last -= 1 }
            if first < last && body(UnsafeBufferPointer(rebasing: bytes[first..<last])) { return true }
            start = end + 1
        }
        return false
    }

    /// The list elements of `bytes` as Strings, OWS trimmed, empty elements skipped.
    static func listElements(_ bytes: UnsafeBufferPointer<UInt8>) -> [String] {
        var elements: [String] = []
        _ = anyListElement(bytes) { elements.append(String(decoding: $0, as: UTF8.self)); return false }
        return elements
    }

    /// A byte as a developer would want to read it in an error message:
    /// `'x'` when printable, `0x16` otherwise.
    static func describe(_ byte: UInt8) -> String {
        if byte > 0x20 && byte < 0x7F {
            return "'\(Character(Unicode.Scalar(byte)))'"
        }
        let digits = Array("0123456789ABCDEF".utf8)
        return "0x" + String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]], as: UTF8.self)
    }
}
