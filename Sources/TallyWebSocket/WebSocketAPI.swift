// STUB — the WebSocket helper replaces this file with the real implementation,
// split into files by type. The public API below is the contract TallyNet codes against.

/// Which side of the connection this codec serves: servers require masked
/// frames from clients (RFC 6455 §5.1), clients require unmasked ones.
public enum WebSocketRole: Sendable { case server, client }

/// A frame opcode (RFC 6455 §5.2). Open-ended so unknown values can be reported.
public struct WebSocketOpcode: RawRepresentable, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let continuation = WebSocketOpcode(rawValue: 0x0)
    public static let text = WebSocketOpcode(rawValue: 0x1)
    public static let binary = WebSocketOpcode(rawValue: 0x2)
    public static let close = WebSocketOpcode(rawValue: 0x8)
    public static let ping = WebSocketOpcode(rawValue: 0x9)
    public static let pong = WebSocketOpcode(rawValue: 0xA)
}

/// A close status code (RFC 6455 §7.4).
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
    public static let tryAgainLater = WebSocketCloseCode(rawValue: 1013)
    /// Whether a peer may send this code in a close frame (RFC 6455 §7.4.1–2).
    public var isValidOnWire: Bool { fatalError("stub") }
}

public enum WebSocketMessageKind: Sendable { case text, binary }

/// What the decoder found in the byte stream.
public enum WebSocketEvent: Sendable {
    /// A complete message (fragments joined, decompressed, text validated as UTF-8).
    case message(WebSocketMessageKind, [UInt8])
    case ping([UInt8])
    case pong([UInt8])
    /// A close frame. `code` is `.noStatus` when the frame had no payload.
    case close(WebSocketCloseCode, reason: String)
}

/// A protocol violation: the connection must be closed with `code`.
public struct WebSocketFailure: Error, Sendable, Equatable {
    public var code: WebSocketCloseCode
    public var reason: String
    public init(code: WebSocketCloseCode, reason: String) { self.code = code; self.reason = reason }
}

/// The incremental RFC 6455 decoder: frames, fragmentation, UTF-8, limits,
/// permessage-deflate. A pure state machine with no I/O.
/// Holds no heap memory between messages (idle connections stay small).
public struct WebSocketDecoder {
    public init(role: WebSocketRole, maxMessageSize: Int, deflate: PerMessageDeflateParameters? = nil) { fatalError("stub") }
    /// Feeds bytes, calling `emit` for each event in order. Returns the
    /// violation that ends the connection, if any; after one, feed nothing more.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? { fatalError("stub") }
}

/// Builds frames. Server frames are unmasked, so one framed message can be
/// written to many connections as is.
public struct WebSocketEncoder {
    public init(role: WebSocketRole, deflate: PerMessageDeflateParameters? = nil) { fatalError("stub") }
    /// One complete message as wire bytes (compressed when deflate was
    /// negotiated and the message is worth compressing; masked for clients).
    public mutating func message(_ kind: WebSocketMessageKind, _ payload: UnsafeRawBufferPointer) -> [UInt8] { fatalError("stub") }
    /// A message split into frames of at most `fragmentSize` payload bytes (never compressed).
    public mutating func fragmentedMessage(_ kind: WebSocketMessageKind, _ payload: UnsafeRawBufferPointer, fragmentSize: Int) -> [UInt8] { fatalError("stub") }
    public mutating func ping(_ payload: UnsafeRawBufferPointer) -> [UInt8] { fatalError("stub") }
    public mutating func pong(_ payload: UnsafeRawBufferPointer) -> [UInt8] { fatalError("stub") }
    /// A close frame; the reason is truncated to fit the 125-byte control limit.
    public mutating func close(_ code: WebSocketCloseCode, reason: String) -> [UInt8] { fatalError("stub") }
    /// Whether `message` output is the same for every connection with the same
    /// parameters (true without compression or with server_no_context_takeover),
    /// so a fan-out may frame once and share the bytes.
    public var producesShareableFrames: Bool { fatalError("stub") }
}

/// The opening handshake's key arithmetic (RFC 6455 §4.2.2).
public enum WebSocketHandshake {
    /// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
    public static func acceptValue(forKey key: String) -> String { fatalError("stub") }
    /// Whether a `Sec-WebSocket-Key` is base64 of exactly 16 bytes.
    public static func isValidKey(_ key: String) -> Bool { fatalError("stub") }
    /// A fresh random key for a client.
    public static func makeKey() -> String { fatalError("stub") }
}

/// permessage-deflate settings a side is willing to use (RFC 7692).
public struct PerMessageDeflateConfig: Sendable {
    public var enabled = true
    public var serverNoContextTakeover = false
    public var clientNoContextTakeover = false
    /// 9...15 (zlib's raw deflate does not support 8).
    public var serverMaxWindowBits = 15
    public var clientMaxWindowBits = 15
    public var compressionLevel = 6
    /// Messages shorter than this are sent uncompressed.
    public var minimumSize = 64
    public init() {}
}

/// The parameters agreed for one connection.
public struct PerMessageDeflateParameters: Sendable, Equatable {
    public var serverNoContextTakeover: Bool
    public var clientNoContextTakeover: Bool
    public var serverMaxWindowBits: Int
    public var clientMaxWindowBits: Int
    public var compressionLevel: Int
    public var minimumSize: Int
    public init(serverNoContextTakeover: Bool = false, clientNoContextTakeover: Bool = false,
                serverMaxWindowBits: Int = 15, clientMaxWindowBits: Int = 15,
                compressionLevel: Int = 6, minimumSize: Int = 64) {
        self.serverNoContextTakeover = serverNoContextTakeover; self.clientNoContextTakeover = clientNoContextTakeover
        self.serverMaxWindowBits = serverMaxWindowBits; self.clientMaxWindowBits = clientMaxWindowBits
        self.compressionLevel = compressionLevel; self.minimumSize = minimumSize
    }
}

/// Extension negotiation (RFC 7692 §5, §7.1).
public enum PerMessageDeflateNegotiation {
    /// Server side: picks the first acceptable permessage-deflate offer from
    /// the client's `Sec-WebSocket-Extensions` values. Returns nil when none
    /// is acceptable or compression is disabled (then no extension is used).
    public static func accept(offers: [String], config: PerMessageDeflateConfig)
        -> (parameters: PerMessageDeflateParameters, responseHeader: String)? { fatalError("stub") }
    /// Client side: the `Sec-WebSocket-Extensions` value to offer.
    public static func offer(config: PerMessageDeflateConfig) -> String { fatalError("stub") }
    /// Client side: validates the server's answer against what was offered.
    public static func confirm(response: String, config: PerMessageDeflateConfig) throws(WebSocketFailure)
        -> PerMessageDeflateParameters { fatalError("stub") }
}
