/// The two kinds of data message (RFC 6455 §5.6): text must be UTF-8,
/// binary is opaque.
public enum WebSocketMessageKind: Sendable { case text, binary }
