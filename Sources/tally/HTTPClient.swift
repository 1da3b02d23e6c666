@preconcurrency import Glibc
import TallyNet
import TallyProtocol
import TallyTLS

/// A small blocking HTTP/1.1 client for the CLI's REST calls (blobs,
/// resolve): one request per connection (`Connection: close`), a body
/// streamed from a file in chunks with progress, the response read whole.
///
/// Like `HubClient`, it refuses to put the token on a plain-text connection
/// to a host that is not loopback (`HubAccess.checkTransport`) before it
/// opens any socket, and sends the token as `Authorization: Bearer`.
struct HTTPClient {
    let access: HubAccess
    /// The hub's base URL, e.g. "http://127.0.0.1:8080".
    let base: String
    var connectTimeoutMillis: Int32 = 10_000
    /// The longest the hub may stay silent while a request is sent or answered.
    var ioTimeoutMillis: Int32 = 60_000
    /// Bytes per write of a streamed body (and per progress report).
    var chunkSize = 64 << 10

    init(access: HubAccess) {
        self.access = access
        self.base = access.httpBase
    }

    /// A request body: bytes in memory, or a file read in chunks.
    enum Body {
        case none
        case bytes([UInt8])
        /// The open descriptor is read from its current offset; `size` bytes.
        case file(fd: Int32, size: Int)

        var size: Int {
            switch self {
            case .none: return 0
            case .bytes(let bytes): return bytes.count
            case .file(_, let size): return size
            }
        }
    }

    func get(_ target: String, headers: [(String, String)] = [], maxBodyBytes: Int = 64 << 20) throws(CLIError) -> HTTPClientResponse {
        try send("GET", target, headers: headers, body: .none, maxBodyBytes: maxBodyBytes, progress: nil)
    }

    /// Sends `body` with `PUT`; `progress(sent, total)` after each chunk.
    func put(_ target: String, body: Body, headers: [(String, String)] = [],
             progress: ((Int, Int) -> Void)? = nil) throws(CLIError) -> HTTPClientResponse {
        try send("PUT", target, headers: headers, body: body, maxBodyBytes: 1 << 20, progress: progress)
    }

    /// One request and its response. Transport failures throw (`CLIError`:
    /// the request may or may not have reached the hub); any HTTP status is
    /// a response.
    func send(_ method: String, _ target: String, headers: [(String, String)], body: Body,
              maxBodyBytes: Int, progress: ((Int, Int) -> Void)?) throws(CLIError) -> HTTPClientResponse {
        let url = base + target
        try access.checkTransport(url)
        let parsed: WebSocketURL
        do { parsed = try WebSocketURL(url) } catch { throw .unreachable(url, "\(error)") }
        let socket = try SocketConnection(host: parsed.host, port: parsed.port, url: url,
                                          timeoutMillis: connectTimeoutMillis)
        socket.timeoutMillis = ioTimeoutMillis
        let transport: any HTTPTransport
        if parsed.secure {
            let context: TLSContext
            do { context = try TLSContext.client() } catch {
                socket.close()
                throw .unreachable(url, "TLS: \(error.message)")
            }
            do throws(CLIError) {
                transport = try TLSTransport(socket,
                                             context: context, serverName: parsed.host)
            } catch {
                socket.close()
                throw error
            }
        } else {
            transport = PlainTransport(socket)
        }
        defer { transport.close() }

        var head = "\(method) \(parsed.requestTarget) HTTP/1.1\r\nHost: \(Self.hostHeader(parsed))\r\n"
        head += "User-Agent: tally-cli\r\nConnection: close\r\nAccept: application/json\r\n"
        if let token = access.token { head += "Authorization: Bearer \(token)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if case .none = body {} else { head += "Content-Length: \(body.size)\r\n" }
        head += "\r\n"

        var parser = HTTPResponseParser(maxBodyBytes: maxBodyBytes, isHeadRequest: method == "HEAD")
        var readBuffer = [UInt8](repeating: 0, count: 64 << 10)
        try transport.writeAll(Array(head.utf8)[...])
        // While the body goes out the hub may already answer (413 before
        // reading 16 MiB, 401): then stop sending and read that answer.
        if let early = try sendBody(body, transport: transport, parser: &parser, buffer: &readBuffer, progress: progress) {
            return early
        }
        while true {
            let count = try transport.read(into: &readBuffer)
            do {
                if count == 0 { return try parser.finish() }
                if case .complete(let response) = try parser.parse(readBuffer[0..<count]) { return response }
            } catch {
                throw .disconnected("the hub at \(url) sent a bad HTTP response: \(error.message)")
            }
        }
    }

    /// Streams the body; a complete early response if the hub answered
    /// before it was all sent.
    private func sendBody(_ body: Body, transport: any HTTPTransport, parser: inout HTTPResponseParser,
                          buffer: inout [UInt8], progress: ((Int, Int) -> Void)?) throws(CLIError) -> HTTPClientResponse? {
        let total = body.size
        switch body {
        case .none:
            return nil
        case .bytes(let bytes):
            var sent = 0
            while sent < bytes.count {
                let end = min(bytes.count, sent + chunkSize)
                do throws(CLIError) {
                    try transport.writeAll(bytes[sent..<end])
                } catch {
                    if let early = try earlyResponse(transport, &parser, &buffer, wait: true) { return early }
                    throw error
                }
                sent = end
                progress?(sent, total)
                if let early = try earlyResponse(transport, &parser, &buffer, wait: false) { return early }
            }
        case .file(let fd, let size):
            var chunk = [UInt8](repeating: 0, count: chunkSize)
            var sent = 0
            while sent < size {
                let want = min(chunkSize, size - sent)
                let got = chunk.withUnsafeMutableBytes { raw in
                    var n: Int
                    repeat { n = Glibc.read(fd, raw.baseAddress, want) } while n < 0 && errno == EINTR
                    return n
                }
                guard got > 0 else {
                    throw .disconnected(got == 0 ? "the photo file ended after \(sent) of \(size) bytes"
                                                 : "cannot read the photo file: \(SocketConnection.errorText())")
                }
                do throws(CLIError) {
                    try transport.writeAll(chunk[0..<got])
                } catch {
                    if let early = try earlyResponse(transport, &parser, &buffer, wait: true) { return early }
                    throw error
                }
                sent += got
                progress?(sent, total)
                if let early = try earlyResponse(transport, &parser, &buffer, wait: false) { return early }
            }
        }
        return nil
    }

    /// Reads an answer that arrived while the body was being sent: the
    /// whole response when one is there, nil when nothing is.
    private func earlyResponse(_ transport: any HTTPTransport, _ parser: inout HTTPResponseParser,
                               _ buffer: inout [UInt8], wait: Bool) throws(CLIError) -> HTTPClientResponse? {
        let first: Int?
        do {
            first = wait ? try transport.read(into: &buffer) : try transport.readNow(into: &buffer)
        } catch {
            return nil
        }
        guard var count = first else { return nil }
        do {
            while true {
                if count == 0 { return try parser.finish() }
                if case .complete(let response) = try parser.parse(buffer[0..<count]) { return response }
                count = try transport.read(into: &buffer)
            }
        } catch let error as HTTPResponseError {
            throw .disconnected("the hub sent a bad HTTP response: \(error.message)")
        } catch let error as CLIError {
            throw error
        } catch {
            throw .disconnected("\(error)")
        }
    }

    /// The `Host` header (RFC 9112 §3.2): the port only when not the default.
    static func hostHeader(_ url: WebSocketURL) -> String {
        let name = url.host.contains(":") ? "[\(url.host)]" : url.host
        return url.port == (url.secure ? 443 : 80) ? name : "\(name):\(url.port)"
    }

    /// Percent-encodes one path segment: everything but RFC 3986's unreserved characters.
    static func percentEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF")
                out += "%\(hex[Int(byte >> 4)])\(hex[Int(byte & 15)])"
            }
        }
        return out
    }
}

extension HTTPClientResponse {
    /// The body as a JSON object, if it is one.
    var json: JSONObject? {
        (try? JSONValue.parse(body, limits: HubClient.replyLimits))?.objectValue
    }

    /// The hub's `{"error":{…}}` as a refusal, or a made-up one for a body
    /// that is not the hub's (a proxy's HTML page).
    var refusal: CLIError {
        if let error = json?["error"]?.objectValue { return .refused(error) }
        return .refused(["code": .string("http_\(status)"),
                         "message": .string("the hub answered HTTP \(status) \(reason)")])
    }
}
