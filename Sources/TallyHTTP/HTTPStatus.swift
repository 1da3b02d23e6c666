/// An HTTP status code with its reason phrase.
///
/// A struct rather than an enum because status codes are an open set
/// (RFC 9110 §15: "HTTP status codes are extensible"): a handler may answer
/// with a code this module has no name for, and the static members below are
/// only the ones Tally itself uses.
public struct HTTPStatus: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The three-digit status code (RFC 9110 §15).
    public var code: Int
    /// The reason phrase written after the code on the status line. RFC 9112
    /// §4 says clients ignore it, so it is for humans reading traces.
    public var reason: String

    public init(_ code: Int, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public static let switchingProtocols = HTTPStatus(101, "Switching Protocols")
    public static let ok = HTTPStatus(200, "OK")
    public static let created = HTTPStatus(201, "Created")
    public static let noContent = HTTPStatus(204, "No Content")
    public static let notModified = HTTPStatus(304, "Not Modified")
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
    public static let tooManyRequests = HTTPStatus(429, "Too Many Requests")
    public static let requestHeaderFieldsTooLarge = HTTPStatus(431, "Request Header Fields Too Large")
    public static let internalServerError = HTTPStatus(500, "Internal Server Error")
    public static let notImplemented = HTTPStatus(501, "Not Implemented")
    public static let serviceUnavailable = HTTPStatus(503, "Service Unavailable")
    public static let httpVersionNotSupported = HTTPStatus(505, "HTTP Version Not Supported")

    /// Whether a response with this status never carries content: 1xx, 204
    /// and 304 (RFC 9110 §6.4.1), so the serializer writes no body for it.
    public var forbidsContent: Bool {
        (100..<200).contains(code) || code == 204 || code == 304
    }

    /// "404 Not Found", for logs.
    public var description: String { "\(code) \(reason)" }
}
