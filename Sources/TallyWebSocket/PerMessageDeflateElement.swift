/// The permessage-deflate parameters named in one offer or response
/// element, checked against RFC 7692 §7.1 but not yet negotiated.
///
/// RFC 7692 §7.1: "A server MUST decline an extension negotiation offer for
/// this extension if any of the following conditions are met: the
/// negotiation offer contains an extension parameter not defined for use in
/// an offer; the negotiation offer contains an extension parameter with an
/// invalid value; the negotiation offer contains multiple extension
/// parameters with the same name." A client likewise "MUST _Fail the
/// WebSocket Connection_" on such a response (§7.1).
struct PerMessageDeflateElement {
    /// Why an element was refused.
    struct Problem: Error, Equatable {
        enum Kind: Equatable {
            /// A parameter this extension does not define (§7.1).
            case unknownParameter
            /// A repeated parameter or a bad value.
            case malformed
        }
        var kind: Kind
        var reason: String
    }

    var serverNoContextTakeover = false
    var clientNoContextTakeover = false
    /// nil when absent (a value is mandatory when present, §7.1.2.1).
    var serverMaxWindowBits: Int?
    /// Whether `client_max_window_bits` appeared, with or without a value.
    var hasClientMaxWindowBits = false
    /// Its value, nil when absent or given without one (§7.1.2.2: in an
    /// offer the bare parameter says the client can honour a limit).
    var clientMaxWindowBits: Int?

    init(_ element: WebSocketExtensionHeader) throws(Problem) {
        var seen: Set<String> = []
        for parameter in element.parameters {
            guard seen.insert(parameter.name).inserted else {
                throw Problem(kind: .malformed, reason: "parameter \(parameter.name) appears twice")
            }
            switch parameter.name {
            case "server_no_context_takeover":
                guard parameter.value == nil else {
                    throw Problem(kind: .malformed, reason: "server_no_context_takeover takes no value")
                }
                serverNoContextTakeover = true
            case "client_no_context_takeover":
                guard parameter.value == nil else {
                    throw Problem(kind: .malformed, reason: "client_no_context_takeover takes no value")
                }
                clientNoContextTakeover = true
            case "server_max_window_bits":
                guard let value = parameter.value, let bits = Self.windowBits(value) else {
                    throw Problem(kind: .malformed, reason: "server_max_window_bits needs a value from 8 to 15")
                }
                serverMaxWindowBits = bits
            case "client_max_window_bits":
                hasClientMaxWindowBits = true
                if let value = parameter.value {
                    guard let bits = Self.windowBits(value) else {
                        throw Problem(kind: .malformed, reason: "client_max_window_bits must be from 8 to 15")
                    }
                    clientMaxWindowBits = bits
                }
            default:
                throw Problem(kind: .unknownParameter, reason: "unknown parameter \(parameter.name)")
            }
        }
    }

    /// RFC 7692 §7.1.2.1: "a decimal integer value without leading zeroes
    /// between 8 to 15, inclusive".
    static func windowBits(_ text: String) -> Int? {
        guard let first = text.utf8.first, first != UInt8(ascii: "0"),
              text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              text.utf8.count <= 2, let bits = Int(text), (8...15).contains(bits) else { return nil }
        return bits
    }
}
