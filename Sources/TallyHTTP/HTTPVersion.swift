/// The protocol version of a request line, `HTTP/<major>.<minor>`
/// (RFC 9112 §2.3). The parser only ever produces major version 1.
public struct HTTPVersion: Sendable, Equatable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)

    /// "HTTP/1.1", as written on the wire.
    public var description: String { "HTTP/\(major).\(minor)" }
}
