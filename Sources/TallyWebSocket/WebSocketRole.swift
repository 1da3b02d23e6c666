/// Which side of the connection this codec serves: servers require masked
/// frames from clients (RFC 6455 §5.1), clients require unmasked ones.
///
/// RFC 6455 §5.1: "a client MUST mask all frames that it sends to the
/// server" and "A server MUST NOT mask any frames that it sends to the
/// client." The role therefore decides both what the decoder accepts and
/// what the encoder produces.
public enum WebSocketRole: Sendable {
    case server, client

    /// The other end of the connection.
    var peer: WebSocketRole { self == .server ? .client : .server }
}
