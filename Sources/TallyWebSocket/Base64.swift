/// Standard base64 (RFC 4648 §4, with padding) for the handshake keys.
///
/// Written here instead of importing Foundation: the two handshake headers
/// are the only users, and both are short.
enum Base64 {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(alphabet[Int(chunk & 63)])
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let chunk = UInt32(bytes[index]) << 16
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(UInt8(ascii: "="))
            output.append(UInt8(ascii: "="))
        case 2:
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(UInt8(ascii: "="))
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    static func encode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { encode($0) }
    }

    /// Decodes padded base64; nil for anything else (wrong length, a
    /// character outside the alphabet, misplaced padding).
    static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(input.count / 4 * 3)
        var index = 0
        while index < input.count {
            let isLast = index + 4 == input.count
            var values: (UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0)
            var padding = 0
            for offset in 0..<4 {
                let character = input[index + offset]
                let value: UInt32
                if character == UInt8(ascii: "=") {
                    // Padding only at the end of the last group, in positions 2 and 3.
                    guard isLast, offset >= 2 else { return nil }
                    padding += 1
                    value = 0
                } else {
                    guard padding == 0, let decoded = decodeCharacter(character) else { return nil }
                    value = decoded
                }
                switch offset {
                case 0: values.0 = value
                case 1: values.1 = value
                case 2: values.2 = value
                default: values.3 = value
                }
            }
            let chunk = values.0 << 18 | values.1 << 12 | values.2 << 6 | values.3
            output.append(UInt8(chunk >> 16 & 0xFF))
            if padding < 2 { output.append(UInt8(chunk >> 8 & 0xFF)) }
            if padding < 1 { output.append(UInt8(chunk & 0xFF)) }
            index += 4
        }
        return output
    }

    private static func decodeCharacter(_ character: UInt8) -> UInt32? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return UInt32(character - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return UInt32(character - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(character - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }
}
