/// One element of a `Sec-WebSocket-Extensions` header: an extension name
/// with its parameters.
///
/// RFC 6455 §9.1:
///
///     extension-list = 1#extension
///     extension = extension-token *( ";" extension-param )
///     extension-param = token [ "=" (token | quoted-string) ]
///         ;When using the quoted-string syntax variant, the value
///         ;after quoted-string unescaping MUST conform to the
///         ;'token' ABNF.
///
/// Parsing is by element: a malformed element is reported as such and the
/// others still parse, so a server can decline one bad offer and take the
/// next (RFC 7692 §5).
struct WebSocketExtensionHeader: Equatable {
    struct Parameter: Equatable {
        /// Lower-cased.
        var name: String
        /// The unquoted value, or nil when the parameter had none.
        var value: String?
    }

    /// Lower-cased extension token.
    var name: String
    var parameters: [Parameter]

    /// The elements of one header value, in order; nil for an element that
    /// does not follow the grammar. Empty elements ("a, , b") are skipped,
    /// as RFC 9110 §5.6.1 asks of list recipients.
    static func parseList(_ value: String) -> [WebSocketExtensionHeader?] {
        let bytes = Array(value.utf8)
        return split(bytes[...], on: UInt8(ascii: ","))
            .map(trim)
            .filter { !$0.isEmpty }
            .map(parseElement)
    }

    private static func parseElement(_ element: ArraySlice<UInt8>) -> WebSocketExtensionHeader? {
        let parts = split(element, on: UInt8(ascii: ";")).map(trim)
        guard let first = parts.first, isToken(first) else { return nil }
        var parameters: [Parameter] = []
        for part in parts.dropFirst() {
            guard let parameter = parseParameter(part) else { return nil }
            parameters.append(parameter)
        }
        return WebSocketExtensionHeader(name: lowercased(first), parameters: parameters)
    }

    private static func parseParameter(_ part: ArraySlice<UInt8>) -> Parameter? {
        guard let equals = part.firstIndex(of: UInt8(ascii: "=")) else {
            return isToken(part) ? Parameter(name: lowercased(part), value: nil) : nil
        }
        let name = trim(part[part.startIndex..<equals])
        let rawValue = trim(part[(equals + 1)...])
        guard isToken(name), let value = parseValue(rawValue) else { return nil }
        return Parameter(name: lowercased(name), value: value)
    }

    /// A token, or a quoted-string whose unescaped content is a token.
    private static func parseValue(_ raw: ArraySlice<UInt8>) -> String? {
        guard raw.first == UInt8(ascii: "\"") else {
            return isToken(raw) ? String(decoding: raw, as: UTF8.self) : nil
        }
        guard raw.count >= 2, raw.last == UInt8(ascii: "\"") else { return nil }
        var content: [UInt8] = []
        var escaped = false
        for byte in raw.dropFirst().dropLast() {
            if escaped {
                content.append(byte)
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                return nil
            } else {
                content.append(byte)
            }
        }
        guard !escaped, isToken(content[...]) else { return nil }
        return String(decoding: content, as: UTF8.self)
    }

    /// Splits on `separator` outside quoted strings.
    private static func split(_ bytes: ArraySlice<UInt8>, on separator: UInt8) -> [ArraySlice<UInt8>] {
        var pieces: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var inQuotes = false
        var escaped = false
        for index in bytes.indices {
            let byte = bytes[index]
            if inQuotes {
                if escaped { escaped = false }
                else if byte == UInt8(ascii: "\\") { escaped = true }
                else if byte == UInt8(ascii: "\"") { inQuotes = false }
            } else if byte == UInt8(ascii: "\"") {
                inQuotes = true
            } else if byte == separator {
                pieces.append(bytes[start..<index])
                start = index + 1
            }
        }
        pieces.append(bytes[start..<bytes.endIndex])
        return pieces
    }

    private static func trim(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
        while let last = slice.last, last == 0x20 || last == 0x09 { slice = slice.dropLast() }
        return slice
    }

    /// RFC 9110 §5.6.2: token = 1*tchar.
    private static func isToken(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard !bytes.isEmpty else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "A")...UInt8(ascii: "Z"):
                return true
            default:
                return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
            }
        }
    }

    private static func lowercased(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }
}
