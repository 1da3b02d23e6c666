@preconcurrency import Glibc
import TallyHTTP
import TallyNet
import TallyProtocol

/// Blocking HTTP/1.1 calls to the hub's REST endpoints (`/v1/resolve`,
/// `/v1/blobs`, `/v1/workflows`): one request per connection
/// (`Connection: close`), a body streamed from memory or a file in chunks
/// with progress, the response read whole by `HTTPResponseParser`.
///
/// A request goes to the first of the access's hubs that accepts the
/// connection: one that cannot be reached gives way to the next, before
/// a byte of the request is sent. It refuses to put the token on a
/// plain-text connection to a host that is not loopback
/// (`HubAccess.checkTransport`, for every hub of the list) before it opens
/// any socket, and sends the token as `Authorization: Bearer`.
public struct RESTClient: Sendable {
    public let access: HubAccess
    /// The first hub's base URL, e.g. "http://127.0.0.1:8080".
    public let base: String
    /// Every hub's base URL, in the order they are tried.
    public let bases: [String]
    public var connectTimeoutMillis: Int32 = 10_000
    /// The longest the hub may stay silent while a request is sent or answered.
    public var ioTimeoutMillis: Int32 = 60_000
    /// Bytes per write of a streamed body (and per progress report).
    public var chunkSize = 64 << 10

    public init(access: HubAccess) {
        self.access = access
        self.bases = access.httpBases
        self.base = bases[0]
    }

    /// A request body: bytes in memory, or a file read in chunks.
    public enum Body: Sendable {
        case none
        case bytes([UInt8])
        /// The open descriptor is read from its current offset; `size` bytes.
        case file(fd: Int32, size: Int)

        var size: Int {
            switch self {
            case .none: 0
            case .bytes(let bytes): bytes.count
            case .file(_, let size): size
            }
        }
    }

    public func get(_ target: String, headers: [(String, String)] = [],
                    maxBodyBytes: Int = 64 << 20) throws(HubError) -> HTTPClientResponse {
        try send("GET", target, headers: headers, body: .none, maxBodyBytes: maxBodyBytes, progress: nil)
    }

    /// Sends `body` with `PUT`; `progress(sent, total)` after each chunk.
    public func put(_ target: String, body: Body, headers: [(String, String)] = [],
                    progress: ((Int, Int) -> Void)? = nil) throws(HubError) -> HTTPClientResponse {
        try send("PUT", target, headers: headers, body: body, maxBodyBytes: 1 << 20, progress: progress)
    }

    /// One request and its response, from the first hub that accepts the
    /// connection. Transport failures after that throw (the request may or
    /// may not have reached the hub); any HTTP status is a response.
    public func send(_ method: String, _ target: String, headers: [(String, String)], body: Body,
                     maxBodyBytes: Int, progress: ((Int, Int) -> Void)?) throws(HubError) -> HTTPClientResponse {
        for base in bases { try access.checkTransport(base + target) }
        var failures: [HubError] = []
        for base in bases {
            let url = base + target
            let parsed: WebSocketURL
            do { parsed = try WebSocketURL(url) } catch { throw .unreachable(url: url, reason: "\(error)") }
            let stream: BlockingStream
            do {
                stream = try BlockingStream.connect(host: parsed.host, port: parsed.port, tls: parsed.secure ? .some(nil) : nil,
                                                    timeoutMillis: connectTimeoutMillis, ioTimeoutMillis: ioTimeoutMillis)
            } catch {
                failures.append(Self.connectError(error, url: url))
                continue
            }
            defer { stream.close() }
            return try exchange(method, parsed, url: url, stream: stream, headers: headers, body: body,
                                maxBodyBytes: maxBodyBytes, progress: progress)
        }
        throw failures.count == 1 ? failures[0] : .noneReachable(failures)
    }

    /// Sends the request on a connected stream and reads the response.
    private func exchange(_ method: String, _ parsed: WebSocketURL, url: String, stream: BlockingStream,
                          headers: [(String, String)], body: Body, maxBodyBytes: Int,
                          progress: ((Int, Int) -> Void)?) throws(HubError) -> HTTPClientResponse {
        var call = Call(stream: stream, url: url,
                        parser: HTTPResponseParser(limits: HTTPResponseLimits(maxBodyBytes: maxBodyBytes),
                                                   isHeadRequest: method == "HEAD"))

        var head = "\(method) \(parsed.requestTarget) HTTP/1.1\r\nHost: \(parsed.hostHeader)\r\n"
        head += "User-Agent: tally-cli\r\nConnection: close\r\nAccept: application/json\r\n"
        if let token = access.token { head += "Authorization: Bearer \(token)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if case .none = body {} else { head += "Content-Length: \(body.size)\r\n" }
        head += "\r\n"
        try call.write(Array(head.utf8)[...])
        // While the body goes out the hub may already answer (413 before
        // reading 16 MiB, 401): then stop sending and read that answer.
        if let early = try sendBody(body, &call, progress: progress) { return early }
        return try call.response()
    }

    /// Streams the body; a complete early response if the hub answered
    /// before it was all sent.
    private func sendBody(_ body: Body, _ call: inout Call,
                          progress: ((Int, Int) -> Void)?) throws(HubError) -> HTTPClientResponse? {
        let total = body.size
        var sent = 0
        var chunk: [UInt8] = []
        while sent < total {
            let piece: ArraySlice<UInt8>
            switch body {
            case .none:
                return nil
            case .bytes(let bytes):
                piece = bytes[sent..<min(total, sent + chunkSize)]
            case .file(let fd, _):
                if chunk.isEmpty { chunk = [UInt8](repeating: 0, count: chunkSize) }
                let want = min(chunkSize, total - sent)
                let got = chunk.withUnsafeMutableBytes { raw in
                    var n: Int
                    repeat { n = Glibc.read(fd, raw.baseAddress, want) } while n < 0 && errno == EINTR
                    return n
                }
                guard got > 0 else {
                    throw .disconnected(got == 0 ? "the photo file ended after \(sent) of \(total) bytes"
                                                 : "cannot read the photo file: \(String(cString: strerror(errno)))")
                }
                piece = chunk[0..<got]
            }
            do throws(HubError) {
                try call.write(piece)
            } catch {
                if let early = try call.earlyResponse(wait: true) { return early }
                throw error
            }
            sent += piece.count
            progress?(sent, total)
            if let early = try call.earlyResponse(wait: false) { return early }
        }
        return nil
    }

    /// One request's connection and its response parser.
    struct Call {
        let stream: BlockingStream
        let url: String
        var parser: HTTPResponseParser
        var buffer = [UInt8](repeating: 0, count: 64 << 10)

        init(stream: BlockingStream, url: String, parser: HTTPResponseParser) {
            self.stream = stream
            self.url = url
            self.parser = parser
        }

        func write(_ bytes: ArraySlice<UInt8>) throws(HubError) {
            do { try stream.writeAll(bytes) } catch { throw RESTClient.ioError(error, url: url) }
        }

        /// Reads until the response is whole (or the connection ends).
        mutating func response() throws(HubError) -> HTTPClientResponse {
            while true {
                let count: Int
                do { count = try stream.read(into: &buffer) } catch { throw RESTClient.ioError(error, url: url) }
                if let response = try feed(count, prefix: "the hub at \(url) sent a bad HTTP response: ") {
                    return response
                }
            }
        }

        /// Reads an answer that arrived while the body was being sent: the
        /// whole response when one is there, nil when nothing is.
        mutating func earlyResponse(wait: Bool) throws(HubError) -> HTTPClientResponse? {
            let first: Int?
            do {
                first = wait ? try stream.read(into: &buffer) : try stream.readNow(into: &buffer)
            } catch {
                return nil
            }
            guard let first else { return nil }
            if let response = try feed(first, prefix: "the hub sent a bad HTTP response: ") { return response }
            return try response()
        }

        /// Feeds `count` bytes of `buffer` (0: the end of the stream).
        mutating func feed(_ count: Int, prefix: String) throws(HubError) -> HTTPClientResponse? {
            let result = count == 0 ? parser.finish() : parser.parse(buffer[0..<count]).result
            switch result {
            case .needMore, .head: return nil
            case .response(let response): return response
            case .failure(let error):
                switch error.kind {
                case .closedBeforeResponse: throw .disconnected(prefix + "the hub closed the connection without answering")
                case .closedInHead: throw .disconnected(prefix + "the hub closed the connection in the middle of the response head")
                case .closedInBody:
                    throw .disconnected(prefix + "the hub closed the connection before the whole response body arrived")
                case .malformed, .tooLarge: throw .disconnected(prefix + error.message)
                }
            }
        }
    }

    /// How a failed connect reads to a user.
    static func connectError(_ error: BlockingStream.Failure, url: String) -> HubError {
        switch error {
        case .resolve(let host, let reason): .unreachable(url: url, reason: "cannot resolve '\(host)': \(reason)")
        case .connect(let reason): .unreachable(url: url, reason: reason)
        case .tls(let reason): .unreachable(url: url, reason: "TLS: \(reason)")
        case .tlsHandshake(let reason): .unreachable(url: url, reason: reason)
        case .closedInHandshake: .unreachable(url: url, reason: "the hub closed the connection during the TLS handshake")
        default: ioError(error, url: url)
        }
    }

    /// How a failed read or write reads to a user.
    static func ioError(_ error: BlockingStream.Failure, url: String) -> HubError {
        switch error {
        case .timeout(let millis): .disconnected("the hub at \(url) did not answer for \(millis / 1000) s")
        case .send(let reason): .disconnected("sending to the hub at \(url) failed: \(reason)")
        case .receive(let reason): .disconnected("reading from the hub at \(url) failed: \(reason)")
        case .tlsIO(let reason): .disconnected(reason)
        case .closed: .disconnected("the hub at \(url) closed the connection")
        case .resolve, .connect, .tls, .tlsHandshake, .closedInHandshake: connectError(error, url: url)
        }
    }

    /// Percent-encodes one path segment: everything but RFC 3986's unreserved characters.
    public static func percentEncode(_ text: String) -> String {
        var out = ""
        let hex = Array("0123456789ABCDEF")
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%\(hex[Int(byte >> 4)])\(hex[Int(byte & 15)])"
            }
        }
        return out
    }
}

extension HTTPClientResponse {
    /// The body as a JSON object, if it is one.
    public var json: JSONObject? {
        (try? JSONValue.parse(body, limits: BlockingTallyClient.replyLimits))?.objectValue
    }

    /// The hub's `{"error":{…}}` as a refusal, or a made-up one for a body
    /// that is not the hub's (a proxy's HTML page).
    public var refusal: HubError {
        if let error = json?["error"]?.objectValue { return .refused(error) }
        return .refused(["code": .string("http_\(status)"),
                         "message": .string("the hub answered HTTP \(status) \(reason)")])
    }
}
