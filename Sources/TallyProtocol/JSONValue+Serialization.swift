/// The deterministic serializer: one value, one byte sequence.
///
/// Compact (no whitespace, RFC 8259 §2 makes it optional), object members in
/// the byte order `JSONObject` keeps, and strings escaped minimally: only what
/// RFC 8259 §7 requires ("quotation mark, reverse solidus, and the control
/// characters (U+0000 through U+001F)"), using the two-character forms where
/// they exist and lowercase `\u00xx` otherwise. Non-ASCII is written as UTF-8
/// and `/` is not escaped. Versions, hashes and test vectors built from this
/// output are therefore stable across runs and machines.
///
/// Serialization recurses once per nesting level; parsed values are bounded
/// by `JSONLimits.maxDepth`, values built in code are the caller's to bound.
extension JSONValue {
    /// The compact serialization as UTF-8 bytes.
    public func serialized() -> [UInt8] {
        var buffer: [UInt8] = []
        serialize(into: &buffer)
        return buffer
    }

    /// The compact serialization as a String.
    public var serializedString: String {
        String(decoding: serialized(), as: UTF8.self)
    }

    /// Appends the compact serialization to `buffer`, so a connection can
    /// reuse one output buffer for every message.
    public func serialize(into buffer: inout [UInt8]) {
        switch self {
        case .null:
            buffer.append(contentsOf: "null".utf8)
        case .bool(let value):
            buffer.append(contentsOf: value ? "true".utf8 : "false".utf8)
        case .number(let number):
            number.serialize(into: &buffer)
        case .string(let string):
            Self.serialize(string: string, into: &buffer)
        case .array(let elements):
            buffer.append(ASCII.openBracket)
            for (index, element) in elements.enumerated() {
                if index > 0 { buffer.append(ASCII.comma) }
                element.serialize(into: &buffer)
            }
            buffer.append(ASCII.closeBracket)
        case .object(let object):
            buffer.append(ASCII.openBrace)
            for (index, member) in object.enumerated() {
                if index > 0 { buffer.append(ASCII.comma) }
                Self.serialize(string: member.key, into: &buffer)
                buffer.append(ASCII.colon)
                member.value.serialize(into: &buffer)
            }
            buffer.append(ASCII.closeBrace)
        }
    }

    static func serialize(string: String, into buffer: inout [UInt8]) {
        buffer.append(ASCII.quote)
        let done: Void? = string.utf8.withContiguousStorageIfAvailable { utf8 in
            appendEscaped(utf8, into: &buffer)
        }
        if done == nil {
            Array(string.utf8).withUnsafeBufferPointer { appendEscaped($0, into: &buffer) }
        }
        buffer.append(ASCII.quote)
    }

    /// Copies runs of bytes that need no escape in one append each.
    private static func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>, into buffer: inout [UInt8]) {
        var runStart = 0
        for index in utf8.indices {
            let byte = utf8[index]
            guard byte < 0x20 || byte == ASCII.quote || byte == ASCII.backslash else { continue }
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
            buffer.append(ASCII.backslash)
            switch byte {
            case ASCII.quote, ASCII.backslash: buffer.append(byte)
            case 0x08: buffer.append(ASCII.b)
            case 0x0C: buffer.append(ASCII.f)
            case 0x0A: buffer.append(ASCII.n)
            case 0x0D: buffer.append(ASCII.r)
            case 0x09: buffer.append(ASCII.t)
            default:
                buffer.append(contentsOf: [ASCII.u, ASCII.zero, ASCII.zero, hexDigit(byte >> 4), hexDigit(byte & 0x0F)])
            }
            runStart = index + 1
        }
        buffer.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? ASCII.zero + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

extension JSONNumber {
    /// Integers in plain decimal; Doubles in Swift's shortest round-trip form,
    /// which for a finite Double is always valid JSON (`1.0`, `1e-05`,
    /// `1e+300`, `-0.0`, `5e-324`).
    public func serialize(into buffer: inout [UInt8]) {
        switch storage {
        case .int(let value):
            if value < 0 { buffer.append(ASCII.minus) }
            var magnitude = value.magnitude
            let start = buffer.count
            repeat {
                buffer.append(ASCII.zero + UInt8(magnitude % 10))
                magnitude /= 10
            } while magnitude > 0
            buffer[start...].reverse()
        case .double(let value):
            buffer.append(contentsOf: value.description.utf8)
        }
    }
}
