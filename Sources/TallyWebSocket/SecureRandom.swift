import COpenSSL

/// Random bytes for masking keys and handshake keys.
///
/// OpenSSL's `RAND_bytes` is a user-space DRBG (no system call per frame).
/// Should it ever fail, the system generator (getrandom) fills in instead:
/// a masking key must never silently be zero or predictable (RFC 6455 §5.3,
/// §10.3).
enum SecureRandom {
    /// Fills a trivial value with random bytes.
    static func fill<T: BitwiseCopyable>(_ value: inout T) {
        withUnsafeMutableBytes(of: &value) { fill($0) }
    }

    /// Fills a buffer with random bytes.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        if RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 { return }
        var generator = SystemRandomNumberGenerator()
        for index in 0..<buffer.count { buffer[index] = generator.next() }
    }
}
