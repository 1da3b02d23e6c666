@preconcurrency import Glibc
import COpenSSL

/// A BIO over a non-blocking socket that sends with `MSG_NOSIGNAL`.
///
/// OpenSSL's own socket BIO (what SSL_set_fd installs) sends with write(2),
/// which raises SIGPIPE when the peer has gone; the event loop ignores
/// SIGPIPE process-wide, but a library should not depend on that. This BIO
/// uses send(2)/recv(2) instead and also records the last errno, which
/// OpenSSL may have overwritten by the time SSL_get_error reports
/// SSL_ERROR_SYSCALL. It never closes the descriptor: the event loop owns it.
enum SocketBIO {
    /// Per-BIO state, allocated by `make`, freed by the destroy callback
    /// (which SSL_free runs).
    struct State {
        var fd: Int32
        /// errno of the last failed send/recv other than EAGAIN, else 0.
        var lastErrno: Int32 = 0
        /// recv returned 0: answers BIO_CTRL_EOF, which OpenSSL consults to
        /// tell an unexpected EOF from a socket error.
        var atEOF = false
    }

    /// A new BIO over `fd`; the caller hands it to SSL_set_bio.
    static func make(fd: Int32) throws(TLSError) -> OpaquePointer {
        guard let method = Method.shared.pointer else {
            throw TLSError("cannot create the socket BIO method (out of memory)")
        }
        OpenSSLErrorQueue.clear()
        guard let bio = BIO_new(method) else {
            throw .openSSL("cannot create socket BIO")
        }
        let state = UnsafeMutablePointer<State>.allocate(capacity: 1)
        state.initialize(to: State(fd: fd))
        BIO_set_data(bio, state)
        BIO_set_init(bio, 1)
        return bio
    }

    /// The state of a BIO made by `make`.
    static func state(_ bio: OpaquePointer?) -> UnsafeMutablePointer<State>? {
        BIO_get_data(bio)?.assumingMemoryBound(to: State.self)
    }

    /// The BIO_METHOD, built once. OpenSSL only reads it after setup, from
    /// any thread, hence `@unchecked Sendable`.
    private struct Method: @unchecked Sendable {
        let pointer: OpaquePointer?
        static let shared = Method()

        private init() {
            let type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK
            guard type > BIO_TYPE_SOURCE_SINK, let method = BIO_meth_new(type, "tally socket") else {
                pointer = nil
                return
            }
            let installed = BIO_meth_set_write_ex(method, socketWrite) == 1
                && BIO_meth_set_read_ex(method, socketRead) == 1
                && BIO_meth_set_ctrl(method, socketCtrl) == 1
                && BIO_meth_set_destroy(method, socketDestroy) == 1
            if installed {
                pointer = method
            } else {
                BIO_meth_free(method)
                pointer = nil
            }
        }
    }
}

// BIO_clear_retry_flags (a macro): BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY.
private let retryFlags = Int32(BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY)

/// BIO write_ex: 1 with `written` set on progress; 0 otherwise, with the
/// retry flags telling OpenSSL whether to report WANT_WRITE.
private func socketWrite(_ bio: OpaquePointer?, _ data: UnsafePointer<CChar>?, _ length: Int,
                         _ written: UnsafeMutablePointer<Int>?) -> Int32 {
    BIO_clear_flags(bio, retryFlags)
    written?.pointee = 0
    guard let state = SocketBIO.state(bio) else { return 0 }
    while true {
        let sent = send(state.pointee.fd, data, length, Int32(MSG_NOSIGNAL))
        if sent >= 0 {
            written?.pointee = sent
            return 1
        }
        let error = errno
        if error == EINTR { continue }
        if error == EAGAIN || error == EWOULDBLOCK {
            BIO_set_flags(bio, Int32(BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY))
        } else {
            state.pointee.lastErrno = error
        }
        return 0
    }
}

/// BIO read_ex: 1 with `readBytes` set when bytes arrived; 0 on EOF
/// (remembered for BIO_CTRL_EOF), on EAGAIN (with retry flags) or on error.
private func socketRead(_ bio: OpaquePointer?, _ data: UnsafeMutablePointer<CChar>?, _ length: Int,
                        _ readBytes: UnsafeMutablePointer<Int>?) -> Int32 {
    BIO_clear_flags(bio, retryFlags)
    readBytes?.pointee = 0
    guard let state = SocketBIO.state(bio) else { return 0 }
    while true {
        let received = recv(state.pointee.fd, data, length, 0)
        if received > 0 {
            readBytes?.pointee = received
            return 1
        }
        if received == 0 {
            state.pointee.atEOF = length > 0
            return 0
        }
        let error = errno
        if error == EINTR { continue }
        if error == EAGAIN || error == EWOULDBLOCK {
            BIO_set_flags(bio, Int32(BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY))
        } else {
            state.pointee.lastErrno = error
        }
        return 0
    }
}

/// BIO ctrl: only what libssl asks of a plain stream. Unknown requests
/// answer 0 ("not supported"), which is what OpenSSL's socket BIO does too
/// (kTLS, datagram and descriptor queries among them).
private func socketCtrl(_ bio: OpaquePointer?, _ command: Int32, _ argument: Int,
                        _ pointer: UnsafeMutableRawPointer?) -> Int {
    switch command {
    case BIO_CTRL_FLUSH, BIO_CTRL_DUP:
        // Nothing is buffered in this BIO; send(2) is the flush.
        return 1
    case BIO_CTRL_EOF:
        return SocketBIO.state(bio)?.pointee.atEOF == true ? 1 : 0
    default:
        return 0
    }
}

/// BIO destroy: frees the state `make` allocated. Runs from SSL_free.
private func socketDestroy(_ bio: OpaquePointer?) -> Int32 {
    if let state = SocketBIO.state(bio) {
        state.deinitialize(count: 1)
        state.deallocate()
        BIO_set_data(bio, nil)
    }
    BIO_set_init(bio, 0)
    return 1
}
