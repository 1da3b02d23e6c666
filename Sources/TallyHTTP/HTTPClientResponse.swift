/// An HTTP/1.1 response as a client reads it: status line, header fields in
/// order, and the decoded body (chunked transfer coding removed).
public struct HTTPClientResponse: Sendable, Equatable {
    public var status: Int
    /// The reason phrase; RFC 9112 §4 says clients ignore it, so it is only
    /// for messages shown to people.
    public var reason: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Whether the server keeps the connection open after this response
    /// (RFC 9112 §9.3): false with `Connection: close`, for HTTP/1.0 without
    /// `keep-alive`, and for a body delimited by the connection's end.
    public var keepAlive: Bool

    public init(status: Int, reason: String = "", version: HTTPVersion = .http1_1,
                headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], keepAlive: Bool = true) {
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers
        self.body = body
        self.keepAlive = keepAlive
    }

    /// The first value of a header field (names compare ignoring ASCII case,
    /// RFC 9110 §5.1).
    public func header(_ name: String) -> String? { headers[name] }
}

/// Why a response could not be read. `kind` tells a truncated response from
/// a malformed one, so a client can phrase each in its own terms; `message`
/// names what was wrong.
public struct HTTPResponseParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The connection ended before any byte of a response.
        case closedBeforeResponse
        /// The connection ended inside the status line or header section.
        case closedInHead
        /// The connection ended before the whole body arrived.
        case closedInBody
        /// The bytes are not an HTTP/1.1 response.
        case malformed
        /// A limit (head size, header count, body size) was crossed.
        case tooLarge
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// What one call to `HTTPResponseParser.parse(_:)` produced.
public enum HTTPResponseParseResult: Sendable, Equatable {
    /// Every byte given was consumed and the response is not complete yet.
    case needMore
    /// The status line and header section of a response whose body follows,
    /// or of an interim 1xx response (only from a parser made with
    /// `reportsHead`); the body is empty. The next calls go on with the body
    /// or the final response.
    case head(HTTPClientResponse)
    /// One complete response; bytes after it were left unconsumed.
    case response(HTTPClientResponse)
    /// Malformed or over a limit; the parser stays failed.
    case failure(HTTPResponseParseError)
}

/// Bounds on what a response may make the parser hold.
public struct HTTPResponseLimits: Sendable, Equatable {
    /// Status line and header section together, CRLFs included.
    public var maxHeadBytes = 64 << 10
    /// Header (and trailer) field lines.
    public var maxHeaderCount = 100
    /// The decoded body.
    public var maxBodyBytes = 1 << 20
    /// One chunk-size line, extensions included.
    public var maxChunkLineBytes = 1024

    public init(maxBodyBytes: Int = 1 << 20) {
        self.maxBodyBytes = maxBodyBytes
    }
}
