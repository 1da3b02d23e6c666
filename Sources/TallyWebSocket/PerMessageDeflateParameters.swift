/// The parameters agreed for one connection.
///
/// "Server" and "client" name directions, as in RFC 7692: the server's
/// parameters govern messages the server compresses (and the client
/// decompresses), the client's the other way round.
public struct PerMessageDeflateParameters: Sendable, Equatable {
    public var serverNoContextTakeover: Bool
    public var clientNoContextTakeover: Bool
    public var serverMaxWindowBits: Int
    public var clientMaxWindowBits: Int
    public var compressionLevel: Int
    public var minimumSize: Int
    public init(serverNoContextTakeover: Bool = false, clientNoContextTakeover: Bool = false,
                serverMaxWindowBits: Int = 15, clientMaxWindowBits: Int = 15,
                compressionLevel: Int = 6, minimumSize: Int = 512) {
        self.serverNoContextTakeover = serverNoContextTakeover; self.clientNoContextTakeover = clientNoContextTakeover
        self.serverMaxWindowBits = serverMaxWindowBits; self.clientMaxWindowBits = clientMaxWindowBits
        self.compressionLevel = compressionLevel; self.minimumSize = minimumSize
    }

    /// Whether the side in `role` must start a fresh LZ77 window for every
    /// message it sends (RFC 7692 §7.1.1).
    func noContextTakeover(sentBy role: WebSocketRole) -> Bool {
        role == .server ? serverNoContextTakeover : clientNoContextTakeover
    }

    /// The window the side in `role` compresses with (RFC 7692 §7.1.2).
    func maxWindowBits(sentBy role: WebSocketRole) -> Int {
        role == .server ? serverMaxWindowBits : clientMaxWindowBits
    }
}

extension PerMessageDeflateParameters: CustomStringConvertible {
    /// In the extension header's own terms, e.g. `permessage-deflate;
    /// server_max_window_bits=15; client_max_window_bits=15`.
    public var description: String {
        var parts = ["permessage-deflate"]
        if serverNoContextTakeover { parts.append("server_no_context_takeover") }
        if clientNoContextTakeover { parts.append("client_no_context_takeover") }
        parts.append("server_max_window_bits=\(serverMaxWindowBits)")
        parts.append("client_max_window_bits=\(clientMaxWindowBits)")
        return parts.joined(separator: "; ")
    }
}
