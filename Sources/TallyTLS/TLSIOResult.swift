/// The outcome of one non-blocking TLS call.
///
/// `.wantRead`/`.wantWrite` are about the socket, not the call: a read may
/// need the socket writable (TLS 1.3 key update) and a write may need it
/// readable. Wait for what is asked, then repeat the same call.
public enum TLSIOResult: Sendable, Equatable {
    /// Bytes read or written (handshake: 0 when complete).
    case done(Int)
    /// Call again when the socket is readable.
    case wantRead
    /// Call again when the socket is writable.
    case wantWrite
    /// The peer closed the TLS session (close_notify or EOF).
    case closed
    /// A fatal error; the session can do nothing more (not even shutdown)
    /// and the message says why, including OpenSSL's error text.
    case failed(String)
}
