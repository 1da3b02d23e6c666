/// The 4-byte masking key of a client frame (RFC 6455 §5.3).
///
/// §5.3: "Octet i of the transformed data is the XOR of octet i of the
/// original data with octet at index i modulo 4 of the masking key." The
/// same operation masks and unmasks. It runs over every payload byte a
/// server receives, so it works eight bytes at a time with a key pattern
/// rotated to the frame position, instead of a closure per byte.
struct WebSocketMask {
    /// The key bytes in wire order, kept in memory order (byte 0 first).
    private var key: UInt32

    init(key: UInt32 = 0) { self.key = key }

    /// Builds a key from its four wire bytes.
    init(_ b0: UInt8, _ b1: UInt8, _ b2: UInt8, _ b3: UInt8) {
        var key: UInt32 = 0
        withUnsafeMutableBytes(of: &key) { raw in
            raw[0] = b0; raw[1] = b1; raw[2] = b2; raw[3] = b3
        }
        self.key = key
    }

    /// A fresh unpredictable key. RFC 6455 §5.3: "The masking key needs to
    /// be unpredictable; thus, the masking key MUST be derived from a strong
    /// source of entropy".
    static func random() -> WebSocketMask {
        var key: UInt32 = 0
        SecureRandom.fill(&key)
        return WebSocketMask(key: key)
    }

    /// Sets key byte `index` (0...3), as the decoder reads it off the wire.
    mutating func setByte(_ index: Int, _ value: UInt8) {
        withUnsafeMutableBytes(of: &key) { $0[index] = value }
    }

    /// The key's four bytes in wire order.
    var bytes: (UInt8, UInt8, UInt8, UInt8) {
        withUnsafeBytes(of: key) { ($0[0], $0[1], $0[2], $0[3]) }
    }

    /// XORs `source` into `destination` (which may be the same memory),
    /// starting at payload position `offset` (only `offset % 4` matters).
    func apply(from source: UnsafeRawBufferPointer, to destination: UnsafeMutableRawBufferPointer, offset: Int) {
        let count = source.count
        guard count > 0, let src = source.baseAddress, let dst = destination.baseAddress else { return }
        precondition(destination.count >= count, "mask destination too small")
        // The key repeated twice, starting at the key byte for `offset`.
        var pattern: UInt64 = 0
        withUnsafeBytes(of: key) { keyBytes in
            withUnsafeMutableBytes(of: &pattern) { raw in
                for i in 0..<8 { raw[i] = keyBytes[(offset &+ i) & 3] }
            }
        }
        var index = 0
        while index + 8 <= count {
            let word = src.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            dst.storeBytes(of: word ^ pattern, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        withUnsafeBytes(of: pattern) { patternBytes in
            while index < count {
                let byte = src.load(fromByteOffset: index, as: UInt8.self)
                dst.storeBytes(of: byte ^ patternBytes[index & 7], toByteOffset: index, as: UInt8.self)
                index += 1
            }
        }
    }

    /// Unmasks (or masks) in place.
    func apply(to buffer: UnsafeMutableRawBufferPointer, offset: Int) {
        apply(from: UnsafeRawBufferPointer(buffer), to: buffer, offset: offset)
    }
}
