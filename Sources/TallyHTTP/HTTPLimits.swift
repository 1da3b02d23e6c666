/// Limits that keep a hostile client from making the parser hold unbounded memory.
///
/// Every limit is checked on the byte that crosses it, not at the end of the
/// line or section, so a client cannot make the parser buffer more than the
/// limit by simply never sending CRLF.
public struct HTTPLimits: Sendable {
    /// Longest request line, CRLF excluded. Crossing it answers 414
    /// (RFC 9112 §3: "A server that receives a request-target longer than any
    /// URI it wishes to parse MUST respond with a 414").
    public var maxRequestLineBytes = 8192
    /// Most header (and trailer) field lines. Crossing it answers 431 (RFC 6585 §5).
    public var maxHeaderCount = 100
    /// Most bytes in the header section, field lines and their CRLFs
    /// included. Crossing it answers 431.
    public var maxHeaderBytes = 32768
    /// Largest decoded body. A larger Content-Length, or chunks adding up to
    /// more, answer 413 (RFC 9110 §15.5.14).
    public var maxBodyBytes = 1 << 20
    /// Paths that take larger bodies (photo uploads): a request whose target
    /// starts with one of these prefixes may carry up to its limit instead.
    /// Everything else keeps `maxBodyBytes`, so one large route does not let
    /// every request hold that much memory.
    public var largeBodies: [LargeBody] = []

    public struct LargeBody: Sendable, Equatable {
        public var pathPrefix: String
        public var maxBytes: Int
        /// What to change to allow more, named in the 413 (e.g. "maxBlobSize").
        public var setting: String?

        public init(pathPrefix: String, maxBytes: Int, setting: String? = nil) {
            self.pathPrefix = pathPrefix
            self.maxBytes = maxBytes
            self.setting = setting
        }
    }

    public init() {}

    /// The body limit of a request with this target.
    public func maxBodyBytes(target: String) -> Int {
        largeBody(target: target)?.maxBytes ?? maxBodyBytes
    }

    func largeBody(target: String) -> LargeBody? {
        largeBodies.first { target.utf8.starts(with: $0.pathPrefix.utf8) }
    }

    /// "N bytes", plus the setting that raises it where there is one.
    func describeBodyLimit(target: String) -> String {
        let large = largeBody(target: target)
        let limit = large?.maxBytes ?? maxBodyBytes
        return large?.setting.map { "\(limit) bytes (the hub's \($0))" } ?? "\(limit) bytes"
    }
}
