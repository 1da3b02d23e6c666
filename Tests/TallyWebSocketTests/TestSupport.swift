import Testing
@testable import TallyWebSocket

/// Bytes from a hex string such as "81 05 48 65 6c 6c 6f".
func hex(_ text: String) -> [UInt8] {
    text.split(whereSeparator: { $0 == " " || $0 == "\n" }).map { UInt8($0, radix: 16)! }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Everything a decoder did with one input.
struct DecodeResult: Equatable {
    var events: [WebSocketEvent] = []
    var failure: WebSocketFailure?
}

/// Feeds `input` in chunks of `chunkSize` bytes and collects what came out.
///
/// After a failure it feeds once more and checks the decoder repeats the
/// same failure without emitting anything.
func decode(_ input: [UInt8], role: WebSocketRole = .client, maxMessageSize: Int = 1 << 24,
            deflate: PerMessageDeflateParameters? = nil, chunkSize: Int) -> DecodeResult {
    var decoder = WebSocketDecoder(role: role, maxMessageSize: maxMessageSize, deflate: deflate)
    return feed(&decoder, input, chunkSize: chunkSize)
}

/// Feeds into an existing decoder (to inspect it afterwards).
func feed(_ decoder: inout WebSocketDecoder, _ input: [UInt8], chunkSize: Int) -> DecodeResult {
    var result = DecodeResult()
    input.withUnsafeBytes { raw in
        var start = 0
        while start < raw.count {
            let end = min(start + max(1, chunkSize), raw.count)
            if let failure = decoder.feed(UnsafeRawBufferPointer(rebasing: raw[start..<end]), { result.events.append($0) }) {
                result.failure = failure
                break
            }
            start = end
        }
    }
    if let failure = result.failure {
        var late: [WebSocketEvent] = []
        let again = [UInt8]([0x81, 0x00]).withUnsafeBytes { decoder.feed($0) { late.append($0) } }
        #expect(again == failure, "a failed decoder must keep reporting its failure")
        #expect(late.isEmpty, "a failed decoder must not emit")
    }
    return result
}

/// Decodes `input` whole, one byte at a time and in a few odd chunk sizes,
/// expects identical results every time, and returns them.
func decodeEveryWay(_ input: [UInt8], role: WebSocketRole = .client, maxMessageSize: Int = 1 << 24,
                    deflate: PerMessageDeflateParameters? = nil,
                    sourceLocation: SourceLocation = #_sourceLocation) -> DecodeResult {
    let whole = decode(input, role: role, maxMessageSize: maxMessageSize, deflate: deflate, chunkSize: input.count)
    for chunkSize in [1, 2, 3, 7, 13] where chunkSize < input.count {
        let chunked = decode(input, role: role, maxMessageSize: maxMessageSize, deflate: deflate, chunkSize: chunkSize)
        #expect(chunked == whole, "chunks of \(chunkSize) differ from whole input", sourceLocation: sourceLocation)
    }
    return whole
}

/// Builds one frame by hand (independently of `WebSocketEncoder`), so tests
/// can also build frames the encoder would never produce.
func frame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, rsv: UInt8 = 0,
           mask: [UInt8]? = nil, lengthBytes: Int? = nil) -> [UInt8] {
    var out: [UInt8] = [(fin ? 0x80 : 0) | rsv << 4 | opcode]
    let maskBit: UInt8 = mask == nil ? 0 : 0x80
    let width = lengthBytes ?? (payload.count <= 125 ? 0 : payload.count <= 0xFFFF ? 2 : 8)
    switch width {
    case 0: out.append(maskBit | UInt8(payload.count))
    case 2: out += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
    default:
        out.append(maskBit | 127)
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: payload.count >> shift)) }
    }
    if let mask {
        out += mask
        out += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    } else {
        out += payload
    }
    return out
}

/// A mask used for client frames in tests.
let testMask: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
func pseudoRandomBytes(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    for index in 0..<count {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        out[index] = UInt8(truncatingIfNeeded: state)
    }
    return out
}

/// Text-like bytes that compress well but not trivially.
func compressibleBytes(count: Int, seed: UInt64) -> [UInt8] {
    let words = ["sync", "record", "tally", "presence", "update", "{\"v\":", "42", "}", " ", "\n", "é", "€"]
    var out: [UInt8] = []
    out.reserveCapacity(count + 16)
    var state = seed | 1
    while out.count < count {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        out += words[Int(state % UInt64(words.count))].utf8
    }
    // Cut at a code point boundary so the bytes stay valid UTF-8.
    var end = count
    while end > 0 && end < out.count && out[end] & 0xC0 == 0x80 { end -= 1 }
    return Array(out[0..<end])
}

extension WebSocketEncoder {
    mutating func message(_ kind: WebSocketMessageKind, _ payload: [UInt8]) -> [UInt8] {
        payload.withUnsafeBytes { message(kind, $0) }
    }
}
