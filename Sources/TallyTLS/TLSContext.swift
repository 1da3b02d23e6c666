import COpenSSL

/// Configuration shared by many sessions (an SSL_CTX). Immutable once built,
/// so it is safe to share between event-loop threads.
///
/// OpenSSL 3 allows one SSL_CTX to be used by sessions on many threads as
/// long as nobody reconfigures it; both factories finish every setting
/// before returning and the type exposes no setter, hence `@unchecked
/// Sendable`.
public final class TLSContext: @unchecked Sendable {
    /// The configured SSL_CTX; owned, freed in deinit.
    let handle: OpaquePointer
    /// Whether sessions made from this context should verify the peer's
    /// certificate (and so its host name).
    let verifiesPeer: Bool

    private init(handle: OpaquePointer, verifiesPeer: Bool) {
        self.handle = handle
        self.verifiesPeer = verifiesPeer
    }

    deinit {
        SSL_CTX_free(handle)
    }

    /// A server context from PEM files (certificate chain and private key).
    /// Throws with a message naming the file that could not be used.
    ///
    /// - Parameters:
    ///   - certificateChainFile: PEM with the leaf certificate first, then
    ///     any intermediates (SSL_CTX_use_certificate_chain_file).
    ///   - privateKeyFile: PEM private key matching the leaf.
    public static func server(certificateChainFile: String, privateKeyFile: String) throws(TLSError) -> TLSContext {
        let context = try make(method: TLS_server_method(), role: "server", verifiesPeer: false)
        let ctx = context.handle

        OpenSSLErrorQueue.clear()
        guard SSL_CTX_use_certificate_chain_file(ctx, certificateChainFile) == 1 else {
            throw .openSSL("cannot load TLS certificate chain from '\(certificateChainFile)'")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, privateKeyFile, SSL_FILETYPE_PEM) == 1 else {
            throw .openSSL("cannot load TLS private key from '\(privateKeyFile)'")
        }
        // use_PrivateKey_file only compares a key with a certificate of the
        // same type; an RSA key next to an EC certificate slips through it.
        guard SSL_CTX_check_private_key(ctx) == 1 else {
            throw .openSSL("TLS private key '\(privateKeyFile)' does not match certificate '\(certificateChainFile)'")
        }

        // Session resumption buys a round trip for reconnecting clients but
        // costs per-session server state (cache) or a ticket key to rotate.
        // The hub's clients hold long-lived WebSockets, so neither pays:
        // no TLS 1.2 tickets, no TLS 1.3 tickets, no server-side cache.
        SSL_CTX_set_options(ctx, tally_SSL_OP_NO_TICKET())
        guard SSL_CTX_set_num_tickets(ctx, 0) == 1 else {
            throw .openSSL("cannot disable TLS 1.3 session tickets")
        }
        _ = tally_SSL_CTX_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_OFF))
        return context
    }

    /// A client context. `caFile` adds trusted roots (PEM); `verifyPeer: false`
    /// accepts any certificate (for tests against self-signed servers only).
    ///
    /// The system trust store (SSL_CTX_set_default_verify_paths) is always
    /// loaded, so `caFile` adds to it rather than replacing it.
    public static func client(caFile: String? = nil, verifyPeer: Bool = true) throws(TLSError) -> TLSContext {
        let context = try make(method: TLS_client_method(), role: "client", verifiesPeer: verifyPeer)
        let ctx = context.handle

        OpenSSLErrorQueue.clear()
        guard SSL_CTX_set_default_verify_paths(ctx) == 1 else {
            throw .openSSL("cannot load the system TLS trust store")
        }
        if let caFile {
            guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                throw .openSSL("cannot load TLS CA certificates from '\(caFile)'")
            }
        }
        SSL_CTX_set_verify(ctx, verifyPeer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nil)
        return context
    }

    /// The settings both roles share: an SSL_CTX with TLS 1.2 as the floor,
    /// forward-secret AEAD ciphers for TLS 1.2 (TLS 1.3 suites are all fine
    /// as OpenSSL ships them), no renegotiation, and the modes a
    /// non-blocking, memory-conscious event loop needs.
    private static func make(method: OpaquePointer?, role: String, verifiesPeer: Bool) throws(TLSError) -> TLSContext {
        OpenSSLErrorQueue.clear()
        guard let ctx = SSL_CTX_new(method) else {
            throw .openSSL("cannot create TLS \(role) context")
        }
        // Owned from here: deinit frees it if a later step throws.
        let context = TLSContext(handle: ctx, verifiesPeer: verifiesPeer)

        guard tally_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else {
            throw .openSSL("cannot set minimum TLS version 1.2")
        }
        // Mozilla "intermediate" TLS 1.2 suites minus finite-field DHE:
        // ECDHE for forward secrecy, AEAD only.
        let tls12Ciphers = [
            "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
            "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
            "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
        ].joined(separator: ":")
        guard SSL_CTX_set_cipher_list(ctx, tls12Ciphers) == 1 else {
            throw .openSSL("cannot set TLS 1.2 cipher list")
        }
        // Renegotiation is a TLS 1.2 attack surface (CVE-2009-3555, CPU
        // exhaustion) the hub never needs; compression is CRIME.
        SSL_CTX_set_options(ctx, tally_SSL_OP_NO_RENEGOTIATION() | tally_SSL_OP_NO_COMPRESSION())

        // RELEASE_BUFFERS: an idle session frees its ~16 KiB read and write
        // record buffers (the hub's idle-connection memory budget is a few
        // KiB). ENABLE_PARTIAL_WRITE: SSL_write returns after each record
        // sent, like write(2), instead of holding on until all is sent.
        // ACCEPT_MOVING_WRITE_BUFFER: a retried SSL_write may pass the same
        // bytes at a new address (the caller's outbound buffer may grow).
        let modes = SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
        let set = tally_SSL_CTX_set_mode(ctx, Int(modes))
        guard set & Int(modes) == Int(modes) else {
            throw .openSSL("cannot set TLS modes")
        }
        return context
    }
}
