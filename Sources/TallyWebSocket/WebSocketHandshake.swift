import COpenSSL

/// The opening handshake's key arithmetic (RFC 6455 §4.2.2).
///
/// Only the key arithmetic lives here; reading and writing the HTTP upgrade
/// request and response is TallyHTTP's and TallyNet's business.
public enum WebSocketHandshake {
    /// The GUID of RFC 6455 §1.3, appended to the client's key before hashing.
    static let magicGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
    ///
    /// RFC 6455 §4.2.2 (5.4): "the base64-encoded SHA-1 of the concatenation
    /// of the |Sec-WebSocket-Key| (as a string, not base64-decoded) with the
    /// string '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'".
    public static func acceptValue(forKey key: String) -> String {
        let input = Array((key + magicGUID).utf8)
        var digest = [UInt8](repeating: 0, count: Int(SHA_DIGEST_LENGTH))
        input.withUnsafeBufferPointer { source in
            digest.withUnsafeMutableBufferPointer { output in
                _ = SHA1(source.baseAddress, source.count, output.baseAddress)
            }
        }
        return Base64.encode(digest)
    }

    /// Whether a `Sec-WebSocket-Key` is base64 of exactly 16 bytes.
    ///
    /// RFC 6455 §4.1: the key "MUST be a nonce consisting of a randomly
    /// selected 16-byte value that has been base64-encoded"; §4.2.1 makes a
    /// server reject a request whose key does not decode to 16 bytes.
    public static func isValidKey(_ key: String) -> Bool {
        Base64.decode(key)?.count == 16
    }

    /// A fresh random key for a client (RFC 6455 §4.1: 16 random bytes,
    /// base64-encoded).
    public static func makeKey() -> String {
        var nonce = [UInt8](repeating: 0, count: 16)
        nonce.withUnsafeMutableBytes { SecureRandom.fill($0) }
        return Base64.encode(nonce)
    }
}
