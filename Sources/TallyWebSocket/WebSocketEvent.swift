/// What the decoder found in the byte stream.
///
/// Equatable so tests (and callers) can compare whole event sequences.
public enum WebSocketEvent: Sendable, Equatable {
    /// A complete message (fragments joined, decompressed, text validated as UTF-8).
    case message(WebSocketMessageKind, [UInt8])
    case ping([UInt8])
    case pong([UInt8])
    /// A close frame. `code` is `.noStatus` when the frame had no payload.
    case close(WebSocketCloseCode, reason: String)
}
