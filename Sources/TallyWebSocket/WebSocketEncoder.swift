/// Builds frames. Server frames are unmasked, so one framed message can be
/// written to many connections as is.
///
/// Client frames get a fresh random masking key each (RFC 6455 §5.3), and
/// lengths always use the shortest encoding (§5.2: "the minimal number of
/// bytes MUST be used to encode the length").
///
/// With permessage-deflate the encoder owns a zlib context, created on the
/// first compressed message. When this side does not take over context the
/// context is released after each message, so an idle connection holds no
/// zlib memory (a deflate context is about 256 KiB at window 15). Measured
/// here, re-creating it costs about as much as `deflateReset` (which clears
/// the same 64 KiB hash table) once the allocator reuses freed memory; in an
/// otherwise empty process glibc returns the memory to the kernel between
/// messages and it is ~4x slower, which a busy server does not see. Copies of an encoder that has compressed share the context:
/// keep one encoder per connection (or per shared fan-out stream).
public struct WebSocketEncoder {
    let role: WebSocketRole
    let deflate: PerMessageDeflateParameters?
    private var deflater: Deflater?

    /// RFC 6455 §5.5: control frame payloads are at most 125 bytes.
    static let maxControlPayload = 125

    public init(role: WebSocketRole, deflate: PerMessageDeflateParameters? = nil) {
        self.role = role
        self.deflate = deflate
    }

    /// One complete message as wire bytes (compressed when deflate was
    /// negotiated and the message is worth compressing; masked for clients).
    ///
    /// Should zlib fail (out of memory), the message goes out uncompressed
    /// and the context is dropped: RFC 7692 §6.1 lets any message be sent
    /// without RSV1, and a fresh context that never refers back to earlier
    /// messages is always decodable by the peer.
    public mutating func message(_ kind: WebSocketMessageKind, _ payload: UnsafeRawBufferPointer) -> [UInt8] {
        let opcode: WebSocketOpcode = kind == .text ? .text : .binary
        if let deflate, payload.count >= deflate.minimumSize,
           let frame = compressedFrame(opcode, payload, deflate) {
            return frame
        }
        return frame(opcode: opcode, payload: payload)
    }

    /// A message split into frames of at most `fragmentSize` payload bytes (never compressed).
    ///
    /// RFC 6455 §5.4: the first frame carries the message opcode, the rest
    /// are continuation frames, and only the last has FIN set. A
    /// `fragmentSize` below 1 is treated as 1.
    public mutating func fragmentedMessage(_ kind: WebSocketMessageKind, _ payload: UnsafeRawBufferPointer,
                                           fragmentSize: Int) -> [UInt8] {
        let size = max(1, fragmentSize)
        let opcode: WebSocketOpcode = kind == .text ? .text : .binary
        guard payload.count > size else { return frame(opcode: opcode, payload: payload) }
        let frames = (payload.count + size - 1) / size
        var output: [UInt8] = []
        output.reserveCapacity(payload.count + frames * Self.maxHeaderLength)
        var position = 0
        while position < payload.count {
            let end = min(position + size, payload.count)
            appendFrame(to: &output, fin: end == payload.count, rsv1: false,
                        opcode: position == 0 ? opcode : .continuation,
                        payload: UnsafeRawBufferPointer(rebasing: payload[position..<end]))
            position = end
        }
        return output
    }

    /// A ping frame; a payload over 125 bytes is truncated (§5.5).
    public mutating func ping(_ payload: UnsafeRawBufferPointer) -> [UInt8] {
        frame(opcode: .ping, payload: Self.controlPayload(payload))
    }

    /// A pong frame; a payload over 125 bytes is truncated (§5.5).
    public mutating func pong(_ payload: UnsafeRawBufferPointer) -> [UInt8] {
        frame(opcode: .pong, payload: Self.controlPayload(payload))
    }

    /// A close frame; the reason is truncated to fit the 125-byte control limit.
    ///
    /// RFC 6455 §5.5.1: the body is a 2-byte code followed by a UTF-8
    /// reason, so the reason gets 123 bytes, cut at a code point boundary
    /// so it stays valid UTF-8 (§5.5.1: "the data MUST be UTF-8"). A code
    /// that may not appear on the wire (such as `.noStatus`) yields a close
    /// frame with no body, which the peer reads as "no status" (§7.1.5).
    public mutating func close(_ code: WebSocketCloseCode, reason: String) -> [UInt8] {
        guard code.isValidOnWire else { return frame(opcode: .close, payload: UnsafeRawBufferPointer(start: nil, count: 0)) }
        var body: [UInt8] = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)]
        body.append(contentsOf: Self.truncatedUTF8(reason, maxBytes: Self.maxControlPayload - 2))
        return body.withUnsafeBytes { frame(opcode: .close, payload: $0) }
    }

    /// Whether `message` output is the same for every connection with the same
    /// parameters (true without compression or with server_no_context_takeover),
    /// so a fan-out may frame once and share the bytes.
    ///
    /// For a client it reports the analogous condition (no deflate, or
    /// client_no_context_takeover) as the contract specifies; client frames
    /// are still masked with a fresh key each, so their bytes differ anyway.
    public var producesShareableFrames: Bool {
        guard let deflate else { return true }
        return deflate.noContextTakeover(sentBy: role)
    }

    // MARK: - Framing (RFC 6455 §5.2)

    /// 2 bytes, 8 of extended length, 4 of masking key.
    static let maxHeaderLength = 14

    private mutating func compressedFrame(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer,
                                          _ deflate: PerMessageDeflateParameters) -> [UInt8]? {
        do {
            let deflater: Deflater
            if let existing = self.deflater {
                deflater = existing
            } else {
                deflater = try Deflater(level: deflate.compressionLevel,
                                        windowBits: deflate.maxWindowBits(sentBy: role))
                self.deflater = deflater
            }
            let role = self.role
            let frame = try deflater.compress(payload) { compressed in
                var output: [UInt8] = []
                output.reserveCapacity(compressed.count + Self.maxHeaderLength)
                Self.appendFrame(to: &output, fin: true, rsv1: true, opcode: opcode,
                                 payload: compressed, masked: role == .client)
                return output
            }
            // RFC 7692 §7.1.1: without context takeover each message starts
            // from an empty window; a new context per message also frees the
            // memory between messages.
            if deflate.noContextTakeover(sentBy: role) { self.deflater = nil }
            return frame
        } catch {
            self.deflater = nil
            return nil
        }
    }

    private func frame(opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(payload.count + Self.maxHeaderLength)
        appendFrame(to: &output, fin: true, rsv1: false, opcode: opcode, payload: payload)
        return output
    }

    private func appendFrame(to output: inout [UInt8], fin: Bool, rsv1: Bool,
                             opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer) {
        Self.appendFrame(to: &output, fin: fin, rsv1: rsv1, opcode: opcode, payload: payload,
                         masked: role == .client)
    }

    /// Appends one frame: header with the minimal length encoding, then the
    /// payload, masked with a fresh key when `masked`.
    static func appendFrame(to output: inout [UInt8], fin: Bool, rsv1: Bool, opcode: WebSocketOpcode,
                            payload: UnsafeRawBufferPointer, masked: Bool) {
        output.append((fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | opcode.rawValue)
        let maskBit: UInt8 = masked ? 0x80 : 0
        let count = payload.count
        if count <= 125 {
            output.append(maskBit | UInt8(count))
        } else if count <= 0xFFFF {
            output.append(maskBit | 126)
            output.append(UInt8(count >> 8))
            output.append(UInt8(count & 0xFF))
        } else {
            output.append(maskBit | 127)
            let length = UInt64(count)
            for shift in stride(from: 56, through: 0, by: -8) {
                output.append(UInt8(truncatingIfNeeded: length >> UInt64(shift)))
            }
        }
        if masked {
            let mask = WebSocketMask.random()
            let key = mask.bytes
            output.append(key.0); output.append(key.1); output.append(key.2); output.append(key.3)
            let start = output.count
            output.append(contentsOf: payload)
            output.withUnsafeMutableBytes { raw in
                mask.apply(to: UnsafeMutableRawBufferPointer(rebasing: raw[start...]), offset: 0)
            }
        } else {
            output.append(contentsOf: payload)
        }
    }

    private static func controlPayload(_ payload: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        payload.count <= maxControlPayload ? payload
            : UnsafeRawBufferPointer(rebasing: payload[0..<maxControlPayload])
    }

    /// The longest prefix of `text` within `maxBytes` that ends on a code
    /// point boundary (continuation bytes are 0b10xxxxxx).
    static func truncatedUTF8(_ text: String, maxBytes: Int) -> [UInt8] {
        var bytes = Array(text.utf8)
        guard bytes.count > maxBytes else { return bytes }
        var cut = maxBytes
        while cut > 0 && bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        bytes.removeSubrange(cut...)
        return bytes
    }
}
