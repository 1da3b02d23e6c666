/// A parsed request. The body is complete (Content-Length or chunked, decoded).
public struct HTTPRequest: Sendable, Equatable {
    /// The method token, case-sensitive as RFC 9110 §9.1 requires ("GET", not "get").
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
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.body = body
        self.keepAlive = keepAlive
    }
}
