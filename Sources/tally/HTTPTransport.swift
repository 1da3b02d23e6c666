@preconcurrency import Glibc
import TallyTLS

/// One connected byte stream for `HTTPClient`: plain TCP or TLS over it.
/// Both are blocking from the caller's view, with every wait bounded by
/// `poll(2)` and the transport's timeout.
protocol HTTPTransport: AnyObject {
    /// Writes some of `bytes` (at least one), waiting until the socket takes them.
    func write(_ bytes: UnsafeRawBufferPointer) throws(CLIError) -> Int
    /// Reads into `buffer`, waiting for data; 0 at the end of the stream.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int
    /// Reads what is there without waiting; nil when nothing is.
    func readNow(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int?
    func close()
}

extension HTTPTransport {
    /// `read(into:)` into an array.
    func read(into buffer: inout [UInt8]) throws(CLIError) -> Int {
        try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(CLIError) -> Int in try read(into: raw) }
        }.get()
    }

    /// `readNow(into:)` into an array.
    func readNow(into buffer: inout [UInt8]) throws(CLIError) -> Int? {
        try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(CLIError) -> Int? in try readNow(into: raw) }
        }.get()
    }

    /// Writes all of `bytes`.
    func writeAll(_ bytes: ArraySlice<UInt8>) throws(CLIError) {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            offset += try bytes[offset...].withUnsafeBytes { raw in
                Result { () throws(CLIError) -> Int in try write(raw) }
            }.get()
        }
    }
}

/// A non-blocking TCP socket connected to the hub, with waits done by poll.
final class SocketConnection {
    let fd: Int32
    let url: String
    /// The bound on each wait: connecting, then each read or write.
    var timeoutMillis: Int32

    /// Resolves (getaddrinfo, may block) and connects, trying each address
    /// in turn, within `timeoutMillis` each.
    init(host: String, port: Int, url: String, timeoutMillis: Int32) throws(CLIError) {
        self.url = url
        self.timeoutMillis = timeoutMillis
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw .unreachable(url, "cannot resolve '\(host)': \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let info = entry {
            entry = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family,
                            Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = Self.errorText(); continue }
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 || errno == EINPROGRESS {
                // A non-blocking connect completes when the socket is writable;
                // SO_ERROR then says how (connect(2), EINPROGRESS).
                if Self.wait(fd, events: Int16(POLLOUT), timeoutMillis: timeoutMillis) {
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    if error == 0 {
                        self.fd = fd
                        return
                    }
                    lastError = String(cString: strerror(error))
                } else {
                    lastError = "no answer within \(timeoutMillis / 1000) s"
                }
            } else {
                lastError = Self.errorText()
            }
            _ = Glibc.close(fd)
        }
        throw .unreachable(url, lastError)
    }

    /// Waits until `events` are ready; false on timeout. EINTR restarts the wait.
    static func wait(_ fd: Int32, events: Int16, timeoutMillis: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let rc = poll(&entry, 1, timeoutMillis)
            if rc > 0 { return true }
            if rc == 0 { return false }
            if errno != EINTR { return true } // let the next call report the error
        }
    }

    func waitOrThrow(_ events: Int16) throws(CLIError) {
        guard Self.wait(fd, events: events, timeoutMillis: timeoutMillis) else {
            throw .disconnected("the hub at \(url) did not answer for \(timeoutMillis / 1000) s")
        }
    }

    static func errorText() -> String { String(cString: strerror(errno)) }

    func close() { _ = Glibc.close(fd) }
}

/// Plain TCP (http://).
final class PlainTransport: HTTPTransport {
    private let socket: SocketConnection

    init(_ socket: SocketConnection) { self.socket = socket }

    func write(_ bytes: UnsafeRawBufferPointer) throws(CLIError) -> Int {
        while true {
            // MSG_NOSIGNAL: a hub that went away must not kill the CLI with SIGPIPE.
            let n = send(socket.fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try socket.waitOrThrow(Int16(POLLOUT))
            default: throw .disconnected("sending to the hub at \(socket.url) failed: \(SocketConnection.errorText())")
            }
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int {
        while true {
            if let n = try readNow(into: buffer) { return n }
            try socket.waitOrThrow(Int16(POLLIN))
        }
    }

    func readNow(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int? {
        while true {
            let n = recv(socket.fd, buffer.baseAddress, buffer.count, 0)
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw .disconnected("reading from the hub at \(socket.url) failed: \(SocketConnection.errorText())")
            }
        }
    }

    func close() { socket.close() }
}

/// TLS over TCP (https://), verifying the hub's certificate and name with
/// the system trust store (`SSL_CERT_FILE` adds a CA, as for `wss://`).
final class TLSTransport: HTTPTransport {
    private let socket: SocketConnection
    private let session: TLSSession

    init(_ socket: SocketConnection, context: TLSContext, serverName: String) throws(CLIError) {
        self.socket = socket
        do {
            session = try TLSSession(context: context, fd: socket.fd, isServer: false, serverName: serverName)
        } catch {
            throw .unreachable(socket.url, "TLS: \(error.message)")
        }
        while true {
            switch session.handshake() {
            case .done: return
            case .wantRead: try socket.waitOrThrow(Int16(POLLIN))
            case .wantWrite: try socket.waitOrThrow(Int16(POLLOUT))
            case .closed: throw .unreachable(socket.url, "the hub closed the connection during the TLS handshake")
            case .failed(let message): throw .unreachable(socket.url, message)
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(CLIError) -> Int {
        while true {
            switch session.write(bytes) {
            case .done(let n): return n
            case .wantRead: try socket.waitOrThrow(Int16(POLLIN))
            case .wantWrite: try socket.waitOrThrow(Int16(POLLOUT))
            case .closed: throw .disconnected("the hub at \(socket.url) closed the connection")
            case .failed(let message): throw .disconnected(message)
            }
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int {
        while true {
            switch session.read(into: buffer) {
            case .done(let n): return n
            case .closed: return 0
            case .wantRead: try socket.waitOrThrow(Int16(POLLIN))
            case .wantWrite: try socket.waitOrThrow(Int16(POLLOUT))
            case .failed(let message): throw .disconnected(message)
            }
        }
    }

    func readNow(into buffer: UnsafeMutableRawBufferPointer) throws(CLIError) -> Int? {
        // Readable bytes may be only TLS records without application data
        // (TLS 1.3 session tickets): then there is nothing to read yet.
        switch session.read(into: buffer) {
        case .done(let n): return n
        case .closed: return 0
        case .wantRead, .wantWrite: return nil
        case .failed(let message): throw .disconnected(message)
        }
    }

    func close() {
        session.shutdown()
        socket.close()
    }
}
