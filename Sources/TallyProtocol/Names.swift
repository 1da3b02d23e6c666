/// The rules for record, list, topic and entry names and for prefixes
/// (PROTOCOL.md, "Names, paths, limits").
public enum Names {
    public static let maxBytes = 512

    /// Throws `bad_name` naming `field` unless `name` is a valid record, list
    /// or topic name: 1–512 UTF-8 bytes, no control characters, no leading or
    /// trailing `/`, no `//`.
    public static func validate(_ name: String, field: String) throws(ProtocolError) {
        try validate(name, field: field, isPrefix: false)
    }

    /// Like `validate` for a prefix: may be empty and may end with `/`.
    public static func validatePrefix(_ prefix: String, field: String) throws(ProtocolError) {
        try validate(prefix, field: field, isPrefix: true)
    }

    private static func validate(_ name: String, field: String, isPrefix: Bool) throws(ProtocolError) {
        func fail(_ message: String) -> ProtocolError {
            ProtocolError(.badName, "\(field) \(message)", details: ["field": .string(field)])
        }
        let utf8 = name.utf8
        if utf8.isEmpty {
            if isPrefix { return }
            throw fail("is empty; give a name such as \"orders/42\"")
        }
        if utf8.count > maxBytes { throw fail("is \(utf8.count) bytes long; the limit is \(maxBytes)") }
        if utf8.first == UInt8(ascii: "/") { throw fail("must not start with '/'") }
        if !isPrefix, utf8.last == UInt8(ascii: "/") { throw fail("must not end with '/'") }
        var previous: UInt8 = 0
        for byte in utf8 {
            if byte < 0x20 || byte == 0x7F { throw fail("contains a control character") }
            if byte == UInt8(ascii: "/"), previous == byte { throw fail("contains '//'") }
            previous = byte
        }
    }
}
