import CZlib

/// Raw DEFLATE decompression of incoming messages (RFC 7692 §7.2.2),
/// streaming and bounded.
///
/// Input is inflated as it arrives instead of being buffered until the
/// message ends, so the compressed bytes are never held and a "zip bomb"
/// is stopped as soon as the output passes the limit: zlib is never asked
/// for more than `limit + 1` bytes.
///
/// Like `Deflater`, the `z_stream` has a fixed heap address because zlib
/// keeps a back-pointer to it.
final class Inflater {
    /// How one `inflate` call ended.
    enum Outcome: Equatable {
        /// All input consumed, all output handed to the sink.
        case ok
        /// The output would pass `limit` (RFC 6455 §10.4 / 1009).
        case limitExceeded
        /// The sink asked to stop (for instance, invalid UTF-8).
        case stopped
        /// The input is not valid DEFLATE data (1007).
        case corrupt(String)
        /// zlib failed for another reason, such as memory (1011).
        case failed(String)
    }

    private let stream: UnsafeMutablePointer<z_stream>
    /// Whether the LZ77 window must survive a final (BFINAL) block.
    private let keepsContext: Bool

    /// Output is produced through a stack buffer of this size.
    private static let outputChunk = 16 * 1024
    /// The most input handed to zlib in one call (`avail_in` is 32-bit).
    private static let maxChunk = 1 << 30
    /// The largest window zlib keeps (RFC 7692 §7.1.2: 2^15 bytes).
    private static let maxWindow = 1 << 15

    /// The tail RFC 7692 §7.2.2 appends to every message before inflating.
    static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    /// - Parameters:
    ///   - windowBits: the peer's negotiated window. Raised to at least 9:
    ///     zlib's deflate silently uses 9 when asked for 8, so a peer that
    ///     announced 8 may still send distances only a 9-bit window covers,
    ///     and a larger inflate window is always safe.
    ///   - keepsContext: whether the window outlives a message (context
    ///     takeover, RFC 7692 §7.1.1).
    init(windowBits: Int, keepsContext: Bool) throws(ZlibError) {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        self.keepsContext = keepsContext
        let bits = Int32(min(max(windowBits, 9), 15))
        let result = tally_inflateInit2(stream, -bits)
        guard result == Z_OK else {
            let error = ZlibError("inflateInit2", code: result, stream: stream)
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw error
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Inflates `input`, handing each piece of output to `sink` (which
    /// returns false to stop), producing at most `limit` bytes.
    func inflate(_ input: UnsafeRawBufferPointer, limit: Int,
                 into sink: (UnsafeRawBufferPointer) -> Bool) -> Outcome {
        var consumed = 0
        var produced = 0
        repeat {
            let chunk = min(input.count - consumed, Self.maxChunk)
            let slice = UnsafeRawBufferPointer(rebasing: input[consumed..<(consumed + chunk)])
            let outcome = inflateChunk(slice, limit: limit - produced, produced: &produced, sink)
            guard outcome == .ok else { return outcome }
            consumed += chunk
        } while consumed < input.count
        return .ok
    }

    private func inflateChunk(_ input: UnsafeRawBufferPointer, limit: Int, produced total: inout Int,
                              _ sink: (UnsafeRawBufferPointer) -> Bool) -> Outcome {
        withUnsafeTemporaryAllocation(byteCount: Self.outputChunk, alignment: 1) { output -> Outcome in
            stream.pointee.next_in = input.baseAddress.map {
                UnsafeMutablePointer(mutating: $0.assumingMemoryBound(to: Bytef.self))
            }
            stream.pointee.avail_in = UInt32(input.count)
            defer {
                stream.pointee.next_in = nil
                stream.pointee.avail_in = 0
                stream.pointee.next_out = nil
                stream.pointee.avail_out = 0
            }
            var produced = 0
            while true {
                // Room for one byte past the limit, to tell "exactly at the
                // limit" from "over it" without inflating further.
                let room = min(output.count, limit - produced + 1)
                let inputBefore = stream.pointee.avail_in
                stream.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: Bytef.self)
                stream.pointee.avail_out = UInt32(room)
                let result = CZlib.inflate(stream, Z_SYNC_FLUSH)
                let written = room - Int(stream.pointee.avail_out)
                // Output zlib produced before an error or past the limit is
                // still shown to the sink (up to the limit) first, so the
                // verdict is the same however the input was cut: a text
                // message with bad UTF-8 before corrupt data fails on the
                // UTF-8, whether the two arrive in one read or in many.
                let within = min(written, limit - produced)
                if within > 0, !sink(UnsafeRawBufferPointer(rebasing: output[0..<within])) { return .stopped }
                // Then the limit, then zlib's verdict: failures follow the
                // order of the output, whatever the read boundaries.
                if written > 0 {
                    produced += written
                    total += written
                    if produced > limit { return .limitExceeded }
                }
                switch result {
                case Z_OK, Z_BUF_ERROR:
                    break
                case Z_STREAM_END:
                    if let failure = restartAfterFinalBlock() { return failure }
                case Z_DATA_ERROR, Z_NEED_DICT:
                    return .corrupt(ZlibError("inflate", code: result, stream: stream).message)
                default:
                    return .failed(ZlibError("inflate", code: result, stream: stream).description)
                }
                let madeProgress = written > 0 || stream.pointee.avail_in != inputBefore || result == Z_STREAM_END
                if !madeProgress { return .ok }
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 && result != Z_STREAM_END {
                    return .ok
                }
            }
        }
    }

    /// Continues after a DEFLATE block with BFINAL set.
    ///
    /// RFC 7692 §7.2.3.4 allows a sender to end a message with a final
    /// block; zlib then reports the end of the stream and accepts nothing
    /// more, while the message (and our appended `00 00 ff ff`) may go on.
    /// Resetting starts a new raw stream; with context takeover the window
    /// is carried over as a preset dictionary, so later messages may still
    /// refer back into it.
    private func restartAfterFinalBlock() -> Outcome? {
        guard keepsContext else {
            let result = inflateReset(stream)
            return result == Z_OK ? nil : .failed(ZlibError("inflateReset", code: result, stream: stream).description)
        }
        return withUnsafeTemporaryAllocation(byteCount: Self.maxWindow, alignment: 1) { window -> Outcome? in
            let base = window.baseAddress!.assumingMemoryBound(to: Bytef.self)
            var length: UInt32 = 0
            var result = inflateGetDictionary(stream, base, &length)
            if result == Z_OK { result = inflateReset(stream) }
            if result == Z_OK, length > 0 { result = inflateSetDictionary(stream, base, length) }
            return result == Z_OK ? nil : .failed(ZlibError("inflate restart", code: result, stream: stream).description)
        }
    }
}
