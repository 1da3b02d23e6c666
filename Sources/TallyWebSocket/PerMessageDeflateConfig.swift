/// permessage-deflate settings a side is willing to use (RFC 7692).
///
/// A configuration value built once at start-up; negotiation turns it and
/// the peer's offer or answer into `PerMessageDeflateParameters`.
public struct PerMessageDeflateConfig: Sendable {
    public var enabled = true
    public var serverNoContextTakeover = false
    public var clientNoContextTakeover = false
    /// 9...15 (zlib's raw deflate does not support 8).
    public var serverMaxWindowBits = 15
    public var clientMaxWindowBits = 15
    public var compressionLevel = 6
    /// Messages shorter than this are sent uncompressed (RFC 7692 §6: each
    /// message chooses, by its RSV1 bit). Small messages gain a few bytes from
    /// deflate but cost a compression per connection, and an uncompressed one
    /// can share the frame built once for every subscriber.
    public var minimumSize = 512
    public init() {}

    /// The window sizes this side can actually compress or decompress with:
    /// zlib rejects raw deflate with 8 bits, and RFC 7692 §7.1.2 stops at 15.
    static let supportedWindowBits = 9...15

    var clampedServerMaxWindowBits: Int { Self.clamp(serverMaxWindowBits) }
    var clampedClientMaxWindowBits: Int { Self.clamp(clientMaxWindowBits) }

    private static func clamp(_ bits: Int) -> Int {
        min(max(bits, supportedWindowBits.lowerBound), supportedWindowBits.upperBound)
    }
}
