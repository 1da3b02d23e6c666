/// A frame opcode (RFC 6455 §5.2). Open-ended so unknown values can be reported.
///
/// RFC 6455 §5.2: "%x3-7 are reserved for further non-control frames" and
/// "%xB-F are reserved for further control frames". A struct rather than an
/// enum lets the decoder name such a value in its failure instead of
/// trapping on it.
public struct WebSocketOpcode: RawRepresentable, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let continuation = WebSocketOpcode(rawValue: 0x0)
    public static let text = WebSocketOpcode(rawValue: 0x1)
    public static let binary = WebSocketOpcode(rawValue: 0x2)
    public static let close = WebSocketOpcode(rawValue: 0x8)
    public static let ping = WebSocketOpcode(rawValue: 0x9)
    public static let pong = WebSocketOpcode(rawValue: 0xA)

    /// RFC 6455 §5.5: "Control frames are identified by opcodes where the
    /// most significant bit of the opcode is 1."
    public var isControl: Bool { rawValue & 0x8 != 0 }

    /// Whether RFC 6455 defines this opcode (the others are reserved and
    /// must fail the connection, §5.2).
    public var isDefined: Bool {
        switch rawValue {
        case 0x0, 0x1, 0x2, 0x8, 0x9, 0xA: return true
        default: return false
        }
    }
}
