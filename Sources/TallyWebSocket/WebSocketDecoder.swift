/// The incremental RFC 6455 decoder: frames, fragmentation, UTF-8, limits,
/// permessage-deflate. A pure state machine with no I/O.
/// Holds no heap memory between messages (idle connections stay small).
///
/// The decoder is fed whatever the socket produced, from one byte to many
/// frames, and behaves identically however the stream is cut: the frame
/// header is read one byte at a time into fixed fields (never into a
/// buffer), payload bytes go straight to the message being assembled
/// (unmasked in place, eight bytes at a time), and every check happens at
/// the earliest byte that can decide it.
///
/// Memory: between messages the only heap object it may hold is the zlib
/// context of a peer that uses context takeover (RFC 7692 §7.1.1, the
/// window must survive); the message and control buffers are released as
/// soon as their event is emitted. Without context takeover the inflater is
/// released after each message too.
///
/// The type holds a reference to its zlib context: copies of a decoder that
/// has started inflating share it, so keep one decoder per connection.
public struct WebSocketDecoder {
    /// Where in a frame the next byte belongs.
    private enum Stage: Equatable {
        case firstByte
        case secondByte
        /// Reading a 16- or 64-bit length; `remaining` bytes to go.
        case extendedLength(remaining: UInt8)
        /// Reading the masking key; `index` is the next key byte.
        case maskKey(index: UInt8)
        case payload
        /// A close frame was emitted: RFC 6455 §5.5.1, the peer "MUST NOT
        /// send any more data frames after sending a Close frame".
        case closed
    }

    let role: WebSocketRole
    let maxMessageSize: Int
    let deflate: PerMessageDeflateParameters?

    private var stage: Stage = .firstByte
    // The frame being read.
    private var opcode = WebSocketOpcode.continuation
    private var fin = false
    private var rsv1 = false
    private var masked = false
    private var mask = WebSocketMask()
    private var length: UInt64 = 0
    private var payloadRemaining: UInt64 = 0
    // The data message being assembled; `messageKind` is nil between messages.
    private var messageKind: WebSocketMessageKind?
    private var messageCompressed = false
    private var message: [UInt8] = []
    private var utf8 = UTF8Validator()
    // A control frame payload split across feeds (at most 125 bytes).
    private var control: [UInt8] = []
    private var inflater: Inflater?
    private var failure: WebSocketFailure?

    /// Masked input is unmasked into a stack buffer of this size before it
    /// is inflated.
    private static let unmaskChunk = 4096
    /// The most a frame header can make the decoder reserve in advance.
    private static let maxReservation: UInt64 = 1 << 20

    public init(role: WebSocketRole, maxMessageSize: Int, deflate: PerMessageDeflateParameters? = nil) {
        self.role = role
        self.maxMessageSize = max(0, maxMessageSize)
        self.deflate = deflate
    }

    /// Feeds bytes, calling `emit` for each event in order. Returns the
    /// violation that ends the connection, if any; after one, feed nothing more.
    ///
    /// Further feeds after a failure return the same failure and emit
    /// nothing; bytes after a close frame are ignored.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        if let failure { return failure }
        let count = bytes.count
        var index = 0
        while index < count {
            let outcome: WebSocketFailure?
            switch stage {
            case .closed:
                return nil
            case .firstByte:
                outcome = readFirstByte(bytes[index])
                index += 1
            case .secondByte:
                outcome = readSecondByte(bytes[index], emit)
                index += 1
            case .extendedLength(let remaining):
                outcome = readLengthByte(bytes[index], remaining: remaining, emit)
                index += 1
            case .maskKey(let keyIndex):
                mask.setByte(Int(keyIndex), bytes[index])
                index += 1
                if keyIndex == 3 {
                    outcome = startPayload(emit)
                } else {
                    stage = .maskKey(index: keyIndex + 1)
                    outcome = nil
                }
            case .payload:
                let take = Int(min(UInt64(count - index), payloadRemaining))
                outcome = consumePayload(UnsafeRawBufferPointer(rebasing: bytes[index..<(index + take)]), emit)
                index += take
            }
            if let outcome { return fail(outcome) }
        }
        return nil
    }

    /// Whether the decoder holds heap memory (for tests of the idle cost).
    var holdsHeapMemory: Bool {
        message.capacity > 0 || control.capacity > 0 || inflater != nil
    }

    // MARK: - Frame header (RFC 6455 §5.2)

    private mutating func readFirstByte(_ byte: UInt8) -> WebSocketFailure? {
        let opcode = WebSocketOpcode(rawValue: byte & 0x0F)
        let rsv1 = byte & 0x40 != 0
        let fin = byte & 0x80 != 0
        // §5.2: "If an unknown opcode is received, the receiving endpoint
        // MUST _Fail the WebSocket Connection_."
        guard opcode.isDefined else {
            return .protocolError("reserved opcode \(opcode.rawValue)")
        }
        // §5.2: RSV bits "MUST be 0 unless an extension is negotiated that
        // defines meanings for non-zero values". Only permessage-deflate is
        // supported, and it defines RSV1 alone.
        guard byte & 0x30 == 0 else {
            return .protocolError("RSV2 or RSV3 set")
        }
        if opcode.isControl {
            // RFC 7692 §6: permessage-deflate applies to data messages only.
            if rsv1 { return .protocolError("RSV1 set on a control frame") }
            // §5.5: "Control frames MUST NOT be fragmented."
            if !fin { return .protocolError("fragmented control frame") }
        } else if opcode == .continuation {
            // §5.4: continuation frames only follow a started message.
            guard messageKind != nil else {
                return .protocolError("continuation frame without a message in progress")
            }
            // RFC 7692 §6.1: RSV1 marks the first frame of a message only.
            if rsv1 { return .protocolError("RSV1 set on a continuation frame") }
        } else {
            // §5.4: fragments of one message may not interleave with another.
            guard messageKind == nil else {
                return .protocolError("new data frame while a fragmented message is in progress")
            }
            if rsv1 && deflate == nil {
                return .protocolError("RSV1 set but permessage-deflate was not negotiated")
            }
        }
        self.opcode = opcode
        self.fin = fin
        self.rsv1 = rsv1
        stage = .secondByte
        return nil
    }

    private mutating func readSecondByte(_ byte: UInt8, _ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        masked = byte & 0x80 != 0
        // §5.1: "The server MUST close the connection upon receiving a frame
        // that is not masked" and "A client MUST close a connection if it
        // detects a masked frame."
        switch role {
        case .server where !masked: return .protocolError("client frame is not masked")
        case .client where masked: return .protocolError("server frame is masked")
        default: break
        }
        let shortLength = byte & 0x7F
        // §5.5: "All control frames MUST have a payload length of 125 bytes or less."
        if opcode.isControl && shortLength > 125 {
            return .protocolError("control frame payload longer than 125 bytes")
        }
        switch shortLength {
        case 126:
            length = 0
            stage = .extendedLength(remaining: 2)
            return nil
        case 127:
            length = 0
            stage = .extendedLength(remaining: 8)
            return nil
        default:
            length = UInt64(shortLength)
            return lengthComplete(emit)
        }
    }

    private mutating func readLengthByte(_ byte: UInt8, remaining: UInt8,
                                         _ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        // §5.2: with the 64-bit form, "the most significant bit MUST be 0".
        // Non-minimal encodings are accepted: they are unambiguous.
        if remaining == 8 && byte & 0x80 != 0 {
            return .protocolError("64-bit payload length has its most significant bit set")
        }
        length = length << 8 | UInt64(byte)
        if remaining == 1 { return lengthComplete(emit) }
        stage = .extendedLength(remaining: remaining - 1)
        return nil
    }

    private mutating func lengthComplete(_ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        // An uncompressed data frame is checked against the limit before any
        // of it is buffered; compressed data is checked as it inflates.
        let compressed = opcode == .continuation ? messageCompressed : rsv1
        if !opcode.isControl && !compressed
            && UInt64(message.count) + length > UInt64(maxMessageSize) {
            return .messageTooBig("message exceeds \(maxMessageSize) bytes")
        }
        if masked {
            stage = .maskKey(index: 0)
            return nil
        }
        return startPayload(emit)
    }

    /// The header is complete: set up the message or control buffer.
    private mutating func startPayload(_ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        payloadRemaining = length
        stage = .payload
        switch opcode {
        case .text, .binary:
            messageKind = opcode == .text ? .text : .binary
            messageCompressed = rsv1
            utf8 = UTF8Validator()
            // The claimed length is within maxMessageSize (checked above) but
            // is still the peer's word: reserve at most 1 MiB up front and
            // let larger messages grow as their bytes actually arrive.
            if !rsv1 && length > 0 { message.reserveCapacity(Int(min(length, Self.maxReservation))) }
        case .continuation:
            break
        default:
            if length > 0 { control.reserveCapacity(Int(length)) }
        }
        // An empty payload completes the frame now, not on the next feed,
        // so every way of cutting the stream emits at the same byte.
        return length == 0 ? finishFrame(emit) : nil
    }

    // MARK: - Payload

    private mutating func consumePayload(_ chunk: UnsafeRawBufferPointer,
                                         _ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        let offset = Int((length - payloadRemaining) & 3)
        payloadRemaining -= UInt64(chunk.count)
        if opcode.isControl {
            Self.append(chunk, to: &control, mask: masked ? mask : nil, maskOffset: offset)
        } else if messageCompressed {
            if let failure = inflateMasked(chunk, maskOffset: offset) { return failure }
        } else {
            let start = message.count
            Self.append(chunk, to: &message, mask: masked ? mask : nil, maskOffset: offset)
            if messageKind == .text, let failure = validateText(from: start) { return failure }
        }
        return payloadRemaining == 0 ? finishFrame(emit) : nil
    }

    /// Appends payload bytes and unmasks them in place.
    /// Static, with the mask passed in: a method reading `self` while
    /// `self.message` is borrowed inout would make Swift copy `self`, and the
    /// copy's extra reference forces the append to reallocate the message.
    private static func append(_ chunk: UnsafeRawBufferPointer, to buffer: inout [UInt8],
                               mask: WebSocketMask?, maskOffset: Int) {
        let start = buffer.count
        buffer.append(contentsOf: chunk)
        if let mask {
            buffer.withUnsafeMutableBytes { raw in
                mask.apply(to: UnsafeMutableRawBufferPointer(rebasing: raw[start...]), offset: maskOffset)
            }
        }
    }

    /// RFC 6455 §8.1 on the bytes appended since `start`, failing at the
    /// first invalid byte rather than at the end of the message.
    private mutating func validateText(from start: Int) -> WebSocketFailure? {
        var validator = utf8
        let valid = message.withUnsafeBytes { validator.consume(UnsafeRawBufferPointer(rebasing: $0[start...])) }
        utf8 = validator
        return valid ? nil : .invalidPayload("invalid UTF-8 in text message")
    }

    private mutating func finishFrame(_ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        stage = .firstByte
        switch opcode {
        case .close:
            return finishClose(emit)
        case .ping:
            let payload = control
            control = []
            emit(.ping(payload))
            return nil
        case .pong:
            let payload = control
            control = []
            emit(.pong(payload))
            return nil
        default:
            return fin ? finishMessage(emit) : nil
        }
    }

    private mutating func finishMessage(_ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        if messageCompressed {
            // RFC 7692 §7.2.2: "Append 4 octets of 0x00 0x00 0xff 0xff to the
            // tail end of the payload of the message" before inflating.
            let failure = Inflater.tail.withUnsafeBytes { inflate($0) }
            if let failure { return failure }
        }
        // §8.1: a text message must end on a code point boundary.
        if messageKind == .text && !utf8.isComplete {
            return .invalidPayload("text message ends inside a UTF-8 sequence")
        }
        let kind = messageKind ?? .binary
        let payload = message
        // Released, not emptied with keepingCapacity: idle connections
        // must not keep the largest message they ever received.
        message = []
        messageKind = nil
        messageCompressed = false
        utf8 = UTF8Validator()
        if let deflate, deflate.noContextTakeover(sentBy: role.peer) { inflater = nil }
        emit(.message(kind, payload))
        return nil
    }

    /// RFC 6455 §5.5.1: an optional 2-byte code, then a UTF-8 reason.
    private mutating func finishClose(_ emit: (WebSocketEvent) -> Void) -> WebSocketFailure? {
        let payload = control
        control = []
        if payload.isEmpty {
            closeDown()
            emit(.close(.noStatus, reason: ""))
            return nil
        }
        guard payload.count >= 2 else {
            return .protocolError("close frame payload of 1 byte")
        }
        let code = WebSocketCloseCode(rawValue: UInt16(payload[0]) << 8 | UInt16(payload[1]))
        guard code.isValidOnWire else {
            return .protocolError("close code \(code.rawValue) is not valid on the wire")
        }
        let reason = payload[2...]
        let valid = reason.withUnsafeBytes { UTF8Validator.isValid($0) }
        guard valid else {
            return .invalidPayload("close reason is not valid UTF-8")
        }
        closeDown()
        emit(.close(code, reason: String(decoding: reason, as: UTF8.self)))
        return nil
    }

    // MARK: - permessage-deflate (RFC 7692 §7.2.2)

    /// Unmasks compressed input into a stack buffer and inflates it.
    private mutating func inflateMasked(_ chunk: UnsafeRawBufferPointer, maskOffset: Int) -> WebSocketFailure? {
        guard masked else { return inflate(chunk) }
        let mask = self.mask
        return withUnsafeTemporaryAllocation(byteCount: Self.unmaskChunk, alignment: 8) { scratch in
            var position = 0
            while position < chunk.count {
                let piece = min(scratch.count, chunk.count - position)
                let source = UnsafeRawBufferPointer(rebasing: chunk[position..<(position + piece)])
                let target = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<piece])
                mask.apply(from: source, to: target, offset: maskOffset + position)
                if let failure = inflate(UnsafeRawBufferPointer(target)) { return failure }
                position += piece
            }
            return nil
        }
    }

    /// Inflates unmasked compressed bytes into the message, enforcing the
    /// size limit on the output and validating text as it appears.
    private mutating func inflate(_ input: UnsafeRawBufferPointer) -> WebSocketFailure? {
        let inflater: Inflater
        if let existing = self.inflater {
            inflater = existing
        } else {
            // Created on the first compressed message, not at negotiation:
            // an idle connection holds no zlib memory.
            let peer = role.peer
            let keepsContext = !(deflate?.noContextTakeover(sentBy: peer) ?? true)
            // Always the largest window, whatever bound the sender agreed to
            // (RFC 7692 §7.1.2 bounds the compressor's window; a larger one
            // on the receiving side reads the same data). With the agreed
            // window, zlib takes a back-reference past it when the bytes are
            // still in its output buffer and refuses it when they are not,
            // so a peer's out-of-bounds reference failed one way read whole
            // and another read in pieces (found by the frame fuzzer).
            do {
                inflater = try Inflater(windowBits: 15, keepsContext: keepsContext)
            } catch {
                return WebSocketFailure(code: .internalError, reason: "cannot start inflate: \(error.description)")
            }
            self.inflater = inflater
        }
        // Moved out so appends do not copy the buffer.
        var buffer = message
        message = []
        var validator = utf8
        let isText = messageKind == .text
        let outcome = inflater.inflate(input, limit: maxMessageSize - buffer.count) { output in
            let start = buffer.count
            buffer.append(contentsOf: output)
            if isText {
                return buffer.withUnsafeBytes { validator.consume(UnsafeRawBufferPointer(rebasing: $0[start...])) }
            }
            return true
        }
        message = buffer
        utf8 = validator
        switch outcome {
        case .ok: return nil
        case .limitExceeded: return .messageTooBig("decompressed message exceeds \(maxMessageSize) bytes")
        case .stopped: return .invalidPayload("invalid UTF-8 in text message")
        case .corrupt(let reason): return .invalidPayload("invalid compressed data: \(reason)")
        case .failed(let reason): return WebSocketFailure(code: .internalError, reason: "inflate failed: \(reason)")
        }
    }

    // MARK: - Ending

    /// After a close frame nothing more is read: release everything.
    private mutating func closeDown() {
        stage = .closed
        message = []
        control = []
        inflater = nil
    }

    /// Records the failure so later feeds repeat it, and releases buffers.
    private mutating func fail(_ failure: WebSocketFailure) -> WebSocketFailure {
        self.failure = failure
        message = []
        control = []
        inflater = nil
        return failure
    }
}
