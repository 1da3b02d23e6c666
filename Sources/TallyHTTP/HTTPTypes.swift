// STUB — the HTTP helper replaces this file with the real implementation.
// The public API below is the contract TallyNet and TallyServer code against.

/// An HTTP status code with its reason phrase.
public struct HTTPStatus: Sendable, Equatable, Hashable {
    public var code: Int
    public var reason: String
    public init(_ code: Int, _ reason: String) { self.code = code; self.reason = reason }
    public static let switchingProtocols = HTTPStatus(101, "Switching Protocols")
    public static let ok = HTTPStatus(200, "OK")
    public static let created = HTTPStatus(201, "Created")
    public static let noContent = HTTPStatus(204, "No Content")
    public static let badRequest = HTTPStatus(400, "Bad Request")
    public static let unauthorized = HTTPStatus(401, "Unauthorized")
    public static let forbidden = HTTPStatus(403, "Forbidden")
    public static let notFound = HTTPStatus(404, "Not Found")
    public static let methodNotAllowed = HTTPStatus(405, "Method Not Allowed")
    public static let requestTimeout = HTTPStatus(408, "Request Timeout")
    public static let conflict = HTTPStatus(409, "Conflict")
    public static let lengthRequired = HTTPStatus(411, "Length Required")
    public static let preconditionFailed = HTTPStatus(412, "Precondition Failed")
    public static let payloadTooLarge = HTTPStatus(413, "Content Too Large")
    public static let uriTooLong = HTTPStatus(414, "URI Too Long")
    public static let unsupportedMediaType = HTTPStatus(415, "Unsupported Media Type")
    public static let upgradeRequired = HTTPStatus(426, "Upgrade Required")
    public static let requestHeaderFieldsTooLarge = HTTPStatus(431, "Request Header Fields Too Large")
    public static let internalServerError = HTTPStatus(500, "Internal Server Error")
    public static let notImplemented = HTTPStatus(501, "Not Implemented")
    public static let serviceUnavailable = HTTPStatus(503, "Service Unavailable")
    public static let httpVersionNotSupported = HTTPStatus(505, "HTTP Version Not Supported")
}

/// Ordered header fields with case-insensitive lookup.
public struct HTTPHeaders: Sendable, Equatable {
    public private(set) var fields: [(name: String, value: String)] = []
    public init() {}
    public init(_ fields: [(String, String)]) { for (n, v) in fields { add(n, v) } }
    public mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }
    /// Replaces every field of this name with one.
    public mutating func set(_ name: String, _ value: String) { fatalError("stub") }
    /// The first value of the field, or nil.
    public subscript(_ name: String) -> String? { fatalError("stub") }
    /// Every value of the field, in order (comma-joined lists not split).
    public func values(_ name: String) -> [String] { fatalError("stub") }
    /// Whether a comma-separated token list field (Connection, Upgrade) holds
    /// the token, compared case-insensitively.
    public func containsToken(_ name: String, _ token: String) -> Bool { fatalError("stub") }
    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool { fatalError("stub") }
}

public struct HTTPVersion: Sendable, Equatable { public var major: Int; public var minor: Int
    public init(major: Int, minor: Int) { self.major = major; self.minor = minor } }

/// A parsed request. The body is complete (Content-Length or chunked, decoded).
public struct HTTPRequest: Sendable {
    public var method: String
    /// The raw request-target, e.g. "/v1/records/a%2Fb?x=1".
    public var target: String
    /// The path part of the target, percent-decoded, without the query.
    public var path: String
    /// The raw query string without "?", or nil.
    public var query: String?
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Whether the connection stays open after this request (HTTP/1.1 default
    /// yes unless `Connection: close`; HTTP/1.0 only with keep-alive).
    public var keepAlive: Bool
    public init(method: String, target: String, path: String, query: String?, version: HTTPVersion,
                headers: HTTPHeaders, body: [UInt8], keepAlive: Bool) {
        self.method = method; self.target = target; self.path = path; self.query = query
        self.version = version; self.headers = headers; self.body = body; self.keepAlive = keepAlive
    }
}

/// Limits that keep a hostile client from making the parser hold unbounded memory.
public struct HTTPLimits: Sendable {
    public var maxRequestLineBytes = 8192
    public var maxHeaderCount = 100
    public var maxHeaderBytes = 32768
    public var maxBodyBytes = 1 << 20
    public init() {}
}

/// Why a request could not be parsed: the status to answer with and a message
/// that says what to fix. The connection is closed after answering.
public struct HTTPParseError: Error, Sendable, Equatable {
    public var status: HTTPStatus
    public var message: String
    public init(status: HTTPStatus, message: String) { self.status = status; self.message = message }
}

public enum HTTPParseResult: Sendable {
    case needMore
    case request(HTTPRequest)
    case failure(HTTPParseError)
}

/// An incremental HTTP/1.1 request parser: a pure state machine over bytes.
public struct HTTPRequestParser: Sendable {
    public init(limits: HTTPLimits = HTTPLimits()) { fatalError("stub") }
    /// Consumes bytes up to the end of at most one request. Bytes after a
    /// complete request are not consumed (pipelining, or WebSocket frames that
    /// follow an upgrade request).
    public mutating func parse(_ bytes: UnsafeRawBufferPointer) -> (consumed: Int, result: HTTPParseResult) { fatalError("stub") }
    /// Whether the parser holds part of a request (for idle timeouts).
    public var isIdle: Bool { fatalError("stub") }
}

/// A response ready to serialize.
public struct HTTPResponse: Sendable {
    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var body: [UInt8]
    public init(status: HTTPStatus, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status; self.headers = headers; self.body = body
    }
    /// A JSON response; `body` is already-serialized JSON.
    public static func json(_ status: HTTPStatus, _ body: [UInt8]) -> HTTPResponse { fatalError("stub") }
    /// The error envelope `{"error":{"code":…,"message":…}}` used by every endpoint.
    public static func error(_ status: HTTPStatus, code: String, message: String) -> HTTPResponse { fatalError("stub") }
    /// Wire bytes: status line, headers (adds Content-Length, and
    /// `Connection: close` when not keeping alive), blank line, body.
    public func serialize(keepAlive: Bool) -> [UInt8] { fatalError("stub") }
}

/// Routes by method and path pattern (`/v1/records/{name...}`, `/healthz`).
/// Built mutable, then frozen by value: the frozen router is immutable.
public struct HTTPRouter<Handler: Sendable>: Sendable {
    public init() {}
    /// `pattern` segments: literal, `{param}` (one segment) or a final
    /// `{param...}` (the rest of the path, slashes included).
    public mutating func add(_ method: String, _ pattern: String, _ handler: Handler) { fatalError("stub") }
    public func match(method: String, path: String) -> HTTPRouteMatch<Handler> { fatalError("stub") }
}

public enum HTTPRouteMatch<Handler: Sendable>: Sendable {
    case found(Handler, parameters: [String: String])
    /// The path exists under other methods (answer 405 with `Allow`).
    case methodNotAllowed(allowed: [String])
    case notFound
}
