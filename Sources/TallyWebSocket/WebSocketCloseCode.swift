/// A close status code (RFC 6455 §7.4).
///
/// Open-ended: a peer may send a code registered after this code was
/// written (or a private 4000–4999 code), and it must decode as a value.
public struct WebSocketCloseCode: RawRepresentable, Sendable, Hashable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let normal = WebSocketCloseCode(rawValue: 1000)
    public static let goingAway = WebSocketCloseCode(rawValue: 1001)
    public static let protocolError = WebSocketCloseCode(rawValue: 1002)
    public static let unsupportedData = WebSocketCloseCode(rawValue: 1003)
    /// Never sent: reported when a close frame carried no code.
    public static let noStatus = WebSocketCloseCode(rawValue: 1005)
    /// Never sent: reported when the connection dropped without a close frame.
    public static let abnormal = WebSocketCloseCode(rawValue: 1006)
    public static let invalidPayload = WebSocketCloseCode(rawValue: 1007)
    public static let policyViolation = WebSocketCloseCode(rawValue: 1008)
    public static let messageTooBig = WebSocketCloseCode(rawValue: 1009)
    public static let mandatoryExtension = WebSocketCloseCode(rawValue: 1010)
    public static let internalError = WebSocketCloseCode(rawValue: 1011)
    /// IANA "Service Restart".
    public static let serviceRestart = WebSocketCloseCode(rawValue: 1012)
    public static let tryAgainLater = WebSocketCloseCode(rawValue: 1013)
    /// IANA "Bad Gateway".
    public static let badGateway = WebSocketCloseCode(rawValue: 1014)

    /// Whether a peer may send this code in a close frame (RFC 6455 §7.4.1–2).
    ///
    /// - 1000–1003 and 1007–1011 are defined by RFC 6455 §7.4.1; 1012–1014
    ///   were assigned later in the IANA registry and are accepted too.
    /// - 1004 is reserved, and 1005, 1006 and 1015 "MUST NOT be set as a
    ///   status code in a Close control frame by an endpoint" (§7.4.1).
    /// - The rest of 1000–2999 is "reserved for definition by this protocol"
    ///   (§7.4.2) and not yet assigned, so a peer sending it is in error.
    /// - 3000–3999 are registered with IANA, 4000–4999 are private use.
    /// - Below 1000 and 5000 and above are not used (§7.4.2).
    public var isValidOnWire: Bool {
        switch rawValue {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }
}
