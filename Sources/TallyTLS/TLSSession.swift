@preconcurrency import Glibc
import COpenSSL

/// One TLS session over a non-blocking socket. Confined to one thread.
/// Uses SSL_MODE_RELEASE_BUFFERS so an idle session holds no record buffers.
///
/// What an idle session still holds (measured, OpenSSL 3.0, EC P-256,
/// TLS 1.3): about 14 KiB on the server side, 9 KiB of which SSL_new
/// allocates before any I/O (the SSL object, copies of the cipher lists and
/// verify parameters); the rest is the session and the two AEAD contexts.
/// A client session is about 19 KiB: it also keeps the server's parsed
/// certificate chain.
///
/// Not Sendable: an SSL object must not be used from two threads at once,
/// and the event loop that owns the socket owns its session. The session
/// never closes the descriptor.
///
/// Retry rule (OpenSSL's, SSL_write(3)): after `write` reports `.wantRead`
/// or `.wantWrite`, call it again with the same bytes, which may have moved
/// (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER) but must not be fewer.
public final class TLSSession {
    /// The SSL object; owned, freed in deinit (which also frees the BIO).
    private let ssl: OpaquePointer
    /// Set by the first fatal error (or EOF without close_notify). OpenSSL
    /// forbids further calls on the SSL object then, SSL_shutdown included,
    /// so every later call answers with this.
    private var terminal: TLSIOResult?

    /// `serverName` (clients only) is sent as SNI and verified against the
    /// certificate when the context verifies peers.
    ///
    /// A verifying client context requires `serverName`: without it the
    /// chain would be checked but not whose it is, which is no
    /// authentication at all. An IP-address `serverName` is matched against
    /// the certificate's IP SANs and not sent as SNI (RFC 6066 §3 allows
    /// host names only). Servers ignore `serverName`.
    ///
    /// - Parameters:
    ///   - context: a context from `TLSContext.server` or `.client`; the
    ///     session keeps the underlying SSL_CTX alive.
    ///   - fd: a connected, non-blocking stream socket owned by the caller.
    ///   - isServer: accept (server) or connect (client) state.
    public init(context: TLSContext, fd: Int32, isServer: Bool, serverName: String? = nil) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard let ssl = SSL_new(context.handle) else {
            throw .openSSL("cannot create TLS session")
        }
        do {
            try Self.configure(ssl, context: context, fd: fd, isServer: isServer, serverName: serverName)
        } catch {
            SSL_free(ssl)
            throw error
        }
        self.ssl = ssl
    }

    private static func configure(_ ssl: OpaquePointer, context: TLSContext, fd: Int32,
                                  isServer: Bool, serverName: String?) throws(TLSError) {
        let bio = try SocketBIO.make(fd: fd)
        // One BIO for both directions: SSL_set_bio takes a single reference.
        SSL_set_bio(ssl, bio, bio)
        if isServer {
            SSL_set_accept_state(ssl)
            return
        }
        SSL_set_connect_state(ssl)
        guard let serverName else {
            if context.verifiesPeer {
                throw TLSError("a TLS client session that verifies its peer needs a serverName")
            }
            return
        }
        let isIPAddress = HostName.isIPAddress(serverName)
        if !isIPAddress {
            guard tally_SSL_set_tlsext_host_name(ssl, serverName) == 1 else {
                throw .openSSL("cannot set TLS server name '\(serverName)'")
            }
        }
        guard context.verifiesPeer else { return }
        // Hostname checking is part of chain verification (X509_VERIFY_PARAM);
        // a mismatch fails the handshake with "hostname mismatch".
        guard let parameters = SSL_get0_param(ssl) else {
            throw .openSSL("cannot read TLS verification parameters")
        }
        if isIPAddress {
            guard X509_VERIFY_PARAM_set1_ip_asc(parameters, serverName) == 1 else {
                throw .openSSL("cannot verify TLS peer as IP address '\(serverName)'")
            }
        } else {
            // "*.example.com" matches "a.example.com" only, never "a*.example.com" forms.
            X509_VERIFY_PARAM_set_hostflags(parameters, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            guard SSL_set1_host(ssl, serverName) == 1 else {
                throw .openSSL("cannot verify TLS peer as host '\(serverName)'")
            }
        }
    }

    deinit {
        SSL_free(ssl)
    }

    /// Drives the handshake; `.done(0)` once complete.
    public func handshake() -> TLSIOResult {
        if let terminal { return terminal }
        OpenSSLErrorQueue.clear()
        let status = SSL_do_handshake(ssl)
        if status == 1 { return .done(0) }
        return outcome(of: status, doing: "TLS handshake")
    }

    public var isHandshakeComplete: Bool {
        SSL_is_init_finished(ssl) == 1
    }

    /// The negotiated protocol ("TLSv1.3", "TLSv1.2") once the handshake is
    /// complete, for logs and metrics; nil before.
    public var protocolVersion: String? {
        guard isHandshakeComplete, let name = SSL_get_version(ssl) else { return nil }
        return String(cString: name)
    }

    /// The SNI host name a client sent (server sessions), else nil.
    var receivedServerName: String? {
        guard let name = SSL_get_servername(ssl, Int32(TLSEXT_NAMETYPE_host_name)) else { return nil }
        return String(cString: name)
    }

    /// Decrypted bytes into `buffer`.
    ///
    /// `.done(n)` has n > 0 unless `buffer` is empty; end of stream is
    /// `.closed`, never `.done(0)`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> TLSIOResult {
        if let terminal { return terminal }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .done(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        let status = SSL_read_ex(ssl, base, buffer.count, &count)
        if status == 1 { return .done(count) }
        return outcome(of: status, doing: "TLS read")
    }

    /// Whether decrypted bytes are buffered inside OpenSSL (read again before waiting on epoll).
    ///
    /// SSL_has_pending: true for decrypted bytes and for received but not yet
    /// decrypted record bytes. The socket may have nothing left to report
    /// to epoll, so the caller must read again; that read can still answer
    /// `.wantRead` when only part of a record is buffered.
    public var hasBufferedPlaintext: Bool {
        SSL_has_pending(ssl) == 1
    }

    /// Encrypts and sends; may write part (SSL_MODE_ENABLE_PARTIAL_WRITE).
    ///
    /// `.done(n)`: the first n bytes are sent (at least one record's worth
    /// or all of them). An empty buffer is `.done(0)` without a call into
    /// OpenSSL.
    public func write(_ bytes: UnsafeRawBufferPointer) -> TLSIOResult {
        if let terminal { return terminal }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .done(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        let status = SSL_write_ex(ssl, base, bytes.count, &count)
        if status == 1 { return .done(count) }
        return outcome(of: status, doing: "TLS write")
    }

    /// Sends close_notify (best effort, non-blocking).
    ///
    /// Does nothing before the handshake completes or after a fatal error,
    /// when OpenSSL forbids SSL_shutdown. If the socket cannot take the
    /// alert now it is dropped: the caller is about to close the socket and
    /// a peer that misses close_notify sees an EOF, which it must handle
    /// anyway. We never wait for the peer's close_notify.
    public func shutdown() {
        guard terminal == nil, isHandshakeComplete else { return }
        OpenSSLErrorQueue.clear()
        _ = SSL_shutdown(ssl)
        // Best effort: a failure here changes nothing for the caller, but
        // its queue entries must not leak into the next session's errors.
        OpenSSLErrorQueue.clear()
    }

    /// Maps a failed SSL call to a result (SSL_get_error(3)), draining the
    /// error queue so the next call on this thread starts clean.
    private func outcome(of status: Int32, doing operation: String) -> TLSIOResult {
        let code = SSL_get_error(ssl, status)
        switch code {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            // close_notify received; writing is still allowed, so not terminal.
            return .closed
        case SSL_ERROR_SYSCALL:
            let socketErrno = SocketBIO.state(SSL_get_rbio(ssl))?.pointee.lastErrno ?? 0
            let queue = OpenSSLErrorQueue.drain()
            if socketErrno == 0 && queue.isEmpty {
                // EOF reported without an error entry: the peer went away.
                return finish(.closed)
            }
            var message = "\(operation) failed: socket error"
            if socketErrno != 0 { message += ": \(Self.describe(errno: socketErrno))" }
            if !queue.isEmpty { message += ": \(queue)" }
            return finish(.failed(message))
        case SSL_ERROR_SSL:
            // OpenSSL 3 reports a TCP FIN without close_notify as this
            // error. For the hub it is a close like any other: WebSocket
            // and HTTP frame their own messages, so truncation is detected
            // above TLS.
            let last = ERR_peek_last_error()
            if ERR_GET_LIB(last) == ERR_LIB_SSL && ERR_GET_REASON(last) == SSL_R_UNEXPECTED_EOF_WHILE_READING {
                OpenSSLErrorQueue.clear()
                return finish(.closed)
            }
            var message = OpenSSLErrorQueue.describe("\(operation) failed")
            let verification = SSL_get_verify_result(ssl)
            if verification != Int(X509_V_OK), let reason = X509_verify_cert_error_string(verification) {
                message += " (certificate verification: \(String(cString: reason)))"
            }
            return finish(.failed(message))
        default:
            // WANT_X509_LOOKUP, WANT_ASYNC and friends need callbacks or
            // engines Tally never installs.
            OpenSSLErrorQueue.clear()
            return finish(.failed("\(operation) failed: unexpected SSL_get_error \(code)"))
        }
    }

    private func finish(_ result: TLSIOResult) -> TLSIOResult {
        terminal = result
        return result
    }

    private static func describe(errno code: Int32) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return "\(String(cString: text)) (errno \(code))"
    }
}

/// A session is confined to its event-loop thread; this keeps anyone from
/// declaring it Sendable later.
@available(*, unavailable)
extension TLSSession: Sendable {}

/// Host-name classification for SNI and certificate matching.
enum HostName {
    /// Whether `name` is an IPv4 or IPv6 address literal (inet_pton's view).
    static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 { return true }
        var v6 = in6_addr()
        return inet_pton(AF_INET6, name, &v6) == 1
    }
}
