// STUB — the TLS helper replaces this file with the real implementation.
// The public API below is the contract TallyNet codes against.

/// A TLS failure with OpenSSL's error queue rendered into the message.
public struct TLSError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Configuration shared by many sessions (an SSL_CTX). Immutable once built,
/// so it is safe to share between event-loop threads.
public final class TLSContext: @unchecked Sendable {
    /// A server context from PEM files (certificate chain and private key).
    /// Throws with a message naming the file that could not be used.
    public static func server(certificateChainFile: String, privateKeyFile: String) throws(TLSError) -> TLSContext { fatalError("stub") }
    /// A client context. `caFile` adds trusted roots (PEM); `verifyPeer: false`
    /// accepts any certificate (for tests against self-signed servers only).
    public static func client(caFile: String? = nil, verifyPeer: Bool = true) throws(TLSError) -> TLSContext { fatalError("stub") }
}

/// The outcome of one non-blocking TLS call.
public enum TLSIOResult: Sendable, Equatable {
    /// Bytes read or written (handshake: 0 when complete).
    case done(Int)
    /// Call again when the socket is readable.
    case wantRead
    /// Call again when the socket is writable.
    case wantWrite
    /// The peer closed the TLS session (close_notify or EOF).
    case closed
    case failed(String)
}

/// One TLS session over a non-blocking socket. Confined to one thread.
/// Uses SSL_MODE_RELEASE_BUFFERS so an idle session holds no record buffers.
public final class TLSSession {
    /// `serverName` (clients only) is sent as SNI and verified against the
    /// certificate when the context verifies peers.
    public init(context: TLSContext, fd: Int32, isServer: Bool, serverName: String? = nil) throws(TLSError) { fatalError("stub") }
    /// Drives the handshake; `.done(0)` once complete.
    public func handshake() -> TLSIOResult { fatalError("stub") }
    public var isHandshakeComplete: Bool { fatalError("stub") }
    /// Decrypted bytes into `buffer`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> TLSIOResult { fatalError("stub") }
    /// Whether decrypted bytes are buffered inside OpenSSL (read again before waiting on epoll).
    public var hasBufferedPlaintext: Bool { fatalError("stub") }
    /// Encrypts and sends; may write part (SSL_MODE_ENABLE_PARTIAL_WRITE).
    public func write(_ bytes: UnsafeRawBufferPointer) -> TLSIOResult { fatalError("stub") }
    /// Sends close_notify (best effort, non-blocking).
    public func shutdown() { fatalError("stub") }
}
