@preconcurrency import Glibc
import TallyTLS

/// A connected byte stream for one-shot clients (REST calls, photo uploads,
/// the benchmarks' `/metrics` reads): plain TCP or TLS over it, blocking
/// from the caller's view, every wait bounded by `poll(2)` and a timeout.
///
/// Names are resolved by `SocketAddress.resolveAll` (the only resolver) and
/// each address is tried in turn. The socket itself is non-blocking, so a
/// silent peer costs a timeout, never a hang. Not thread-safe: one owner.
public final class BlockingStream {
    /// Why the stream could not be opened or used. The cases carry the
    /// system's or OpenSSL's words; callers phrase them for their users.
    public enum Failure: Error, Sendable, Equatable {
        /// getaddrinfo found no address (its message).
        case resolve(host: String, reason: String)
        /// No address accepted the connection (the last one's reason).
        case connect(String)
        /// A TLS context or session could not be made.
        case tls(String)
        /// The TLS handshake failed (OpenSSL's reason, e.g. a certificate
        /// that does not verify).
        case tlsHandshake(String)
        /// The peer closed during the TLS handshake.
        case closedInHandshake
        /// The peer was silent for `timeoutMillis`.
        case timeout(millis: Int32)
        /// A plain socket's send or receive failed (strerror's words).
        case send(String)
        case receive(String)
        /// A TLS read or write failed (OpenSSL's words).
        case tlsIO(String)
        /// The peer closed the TLS session while we were writing.
        case closed
    }

    let fd: Int32
    private var tls: TLSSession?
    private var open = true
    /// The bound on each wait once connected: each read or write.
    public var timeoutMillis: Int32

    private init(fd: Int32, timeoutMillis: Int32) {
        self.fd = fd
        self.timeoutMillis = timeoutMillis
    }

    deinit { close() }

    /// Resolves `host` (may block), connects to its addresses in turn within
    /// `timeoutMillis` each, and with `tls` runs the TLS handshake
    /// (verifying the certificate for `host`).
    /// - Parameter ioTimeoutMillis: the bound on each wait once connected
    ///   (the TLS handshake's included).
    /// - Parameter tls: nil for plain TCP; `.some(nil)` for the system trust
    ///   store (`SSL_CERT_FILE` adds a CA); or a context of the caller's.
    public static func connect(host: String, port: Int, tls: TLSContext??, timeoutMillis: Int32,
                               ioTimeoutMillis: Int32? = nil) throws(Failure) -> BlockingStream {
        let addresses: [SocketAddress]
        do { addresses = try SocketAddress.resolveAll(host: host, port: port, passive: false) } catch {
            throw .resolve(host: host, reason: error.reason)
        }
        var lastError = "no address"
        for address in addresses {
            let fd = socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = errnoText(); continue }
            Sys.setNoDelay(fd)
            if address.withSockAddr({ Glibc.connect(fd, $0, $1) }) == 0 || errno == EINPROGRESS {
                // A non-blocking connect completes when the socket is
                // writable; SO_ERROR then says how (connect(2), EINPROGRESS).
                if wait(fd, events: Int16(POLLOUT), timeoutMillis: timeoutMillis) {
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    if error == 0 {
                        let stream = BlockingStream(fd: fd, timeoutMillis: ioTimeoutMillis ?? timeoutMillis)
                        if let tls { try stream.startTLS(context: tls, serverName: host) }
                        return stream
                    }
                    lastError = String(cString: strerror(error))
                } else {
                    lastError = "no answer within \(timeoutMillis / 1000) s"
                }
            } else {
                lastError = errnoText()
            }
            _ = Glibc.close(fd)
        }
        throw .connect(lastError)
    }

    private func startTLS(context: TLSContext?, serverName: String) throws(Failure) {
        let session: TLSSession
        do throws(TLSError) {
            let context = if let context { context } else { try TLSContext.client() }
            session = try TLSSession(context: context, fd: fd, isServer: false, serverName: serverName)
        } catch {
            close()
            throw .tls(error.message)
        }
        tls = session
        while true {
            switch session.handshake() {
            case .done: return
            case .wantRead: try waitOrThrow(Int16(POLLIN))
            case .wantWrite: try waitOrThrow(Int16(POLLOUT))
            case .closed: close(); throw .closedInHandshake
            case .failed(let message): close(); throw .tlsHandshake(message)
            }
        }
    }

    /// Writes some of `bytes` (at least one), waiting until the socket takes them.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> Int {
        while true {
            if let tls {
                switch tls.write(bytes) {
                case .done(let n): return n
                case .wantRead: try waitOrThrow(Int16(POLLIN))
                case .wantWrite: try waitOrThrow(Int16(POLLOUT))
                case .closed: throw .closed
                case .failed(let message): throw .tlsIO(message)
                }
                continue
            }
            switch Result(catching: { () throws(SystemError) in try Sys.write(fd, bytes) }) {
            case .success(.processed(let n)): return n
            case .success(.wouldBlock): try waitOrThrow(Int16(POLLOUT))
            case .failure(let error): throw .send(String(cString: strerror(error.errno)))
            }
        }
    }

    /// Writes all of `bytes`.
    public func writeAll(_ bytes: ArraySlice<UInt8>) throws(Failure) {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            offset += try bytes[offset...].withUnsafeBytes { raw in
                Result { () throws(Failure) -> Int in try write(raw) }
            }.get()
        }
    }

    /// Reads into `buffer`, waiting for data; 0 at the end of the stream.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
        while true {
            if let n = try readNow(into: buffer) { return n }
            try waitOrThrow(Int16(POLLIN))
        }
    }

    /// Reads what is there without waiting; nil when nothing is.
    public func readNow(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int? {
        if let tls {
            // Readable bytes may be only TLS records without application
            // data (TLS 1.3 session tickets): then there is nothing yet.
            switch tls.read(into: buffer) {
            case .done(let n): return n
            case .closed: return 0
            case .wantRead, .wantWrite: return nil
            case .failed(let message): throw .tlsIO(message)
            }
        }
        switch Result(catching: { () throws(SystemError) in try Sys.read(fd, buffer) }) {
        case .success(.processed(let n)): return n
        case .success(.wouldBlock): return nil
        case .failure(let error): throw .receive(String(cString: strerror(error.errno)))
        }
    }

    /// `read(into:)` into an array.
    public func read(into buffer: inout [UInt8]) throws(Failure) -> Int {
        try buffer.withUnsafeMutableBytes { raw in Result { () throws(Failure) -> Int in try read(into: raw) } }.get()
    }

    /// `readNow(into:)` into an array.
    public func readNow(into buffer: inout [UInt8]) throws(Failure) -> Int? {
        try buffer.withUnsafeMutableBytes { raw in Result { () throws(Failure) -> Int? in try readNow(into: raw) } }.get()
    }

    /// Closes (after a TLS close_notify); later calls do nothing.
    public func close() {
        guard open else { return }
        open = false
        tls?.shutdown()
        tls = nil
        _ = Glibc.close(fd)
    }

    private func waitOrThrow(_ events: Int16) throws(Failure) {
        guard Self.wait(fd, events: events, timeoutMillis: timeoutMillis) else { throw .timeout(millis: timeoutMillis) }
    }

    /// Waits until `events` are ready; false on timeout. EINTR restarts the
    /// wait; other errors return true so the next call reports them.
    static func wait(_ fd: Int32, events: Int16, timeoutMillis: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let rc = poll(&entry, 1, timeoutMillis)
            if rc > 0 { return true }
            if rc == 0 { return false }
            if errno != EINTR { return true }
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}
