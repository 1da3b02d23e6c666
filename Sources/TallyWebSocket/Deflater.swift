import CZlib

/// Raw DEFLATE compression of outgoing messages (RFC 7692 §7.2.1).
///
/// One instance is one LZ77 context. The `z_stream` lives at a fixed heap
/// address because zlib keeps a back-pointer to it in its internal state
/// (`state->strm`) and checks it on every call: a Swift struct that could
/// move would make zlib report `Z_STREAM_ERROR`. The class owns that memory
/// and frees zlib's state in `deinit`.
final class Deflater {
    private let stream: UnsafeMutablePointer<z_stream>

    /// The most input handed to zlib in one call (`avail_in` is 32-bit).
    private static let maxChunk = 1 << 30

    /// - Parameters:
    ///   - level: zlib compression level, clamped to 0...9.
    ///   - windowBits: LZ77 window as negotiated (RFC 7692 §7.1.2.1). zlib's
    ///     raw deflate cannot use 8, so 8 is raised to 9; negotiation never
    ///     agrees to 8 for a side this codec compresses for.
    init(level: Int, windowBits: Int) throws(ZlibError) {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let bits = Int32(min(max(windowBits, 9), 15))
        // Negative window bits select raw deflate: no zlib header or
        // trailer, as RFC 7692 §7.2.1 requires.
        let result = tally_deflateInit2(stream, Int32(min(max(level, 0), 9)), -bits, 8)
        guard result == Z_OK else {
            let error = ZlibError("deflateInit2", code: result, stream: stream)
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw error
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Compresses one message and hands `body` the result without the
    /// final `00 00 ff ff`.
    ///
    /// RFC 7692 §7.2.1: "Compress all the octets of the payload of the
    /// message using DEFLATE", flush with an empty non-final block (what
    /// `Z_SYNC_FLUSH` produces) and "If the resulting data does not end with
    /// an empty DEFLATE block with no compression (the "BTYPE" bits are set
    /// to 00), append an empty DEFLATE block with no compression to the tail
    /// end", then "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the
    /// tail end." The stream is not reset: context takeover is the caller's
    /// choice (it drops the deflater to start afresh).
    func compress<Result>(_ payload: UnsafeRawBufferPointer,
                          _ body: (UnsafeRawBufferPointer) -> Result) throws(ZlibError) -> Result {
        // deflateBound covers one Z_FINISH pass; a sync flush adds at most a
        // few bytes, and the loop below grows the buffer if ever needed.
        var capacity = Int(deflateBound(stream, UInt(payload.count))) + 16
        var output = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 1)
        defer { output.deallocate() }
        var written = 0
        var consumed = 0

        repeat {
            let chunk = min(payload.count - consumed, Self.maxChunk)
            stream.pointee.next_in = chunk == 0 ? nil
                : UnsafeMutablePointer(mutating: payload.baseAddress!.advanced(by: consumed).assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = UInt32(chunk)
            // Flush only with the last piece of input.
            let isLast = consumed + chunk == payload.count
            repeat {
                if written == capacity {
                    let grown = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity * 2, alignment: 1)
                    grown.copyMemory(from: UnsafeRawBufferPointer(output))
                    output.deallocate()
                    output = grown
                    capacity *= 2
                }
                let room = min(capacity - written, Int(UInt32.max))
                stream.pointee.next_out = output.baseAddress!.advanced(by: written).assumingMemoryBound(to: Bytef.self)
                stream.pointee.avail_out = UInt32(room)
                let result = deflate(stream, isLast ? Z_SYNC_FLUSH : Z_NO_FLUSH)
                // Z_BUF_ERROR only means "no progress possible": not fatal.
                guard result == Z_OK || result == Z_BUF_ERROR else {
                    throw ZlibError("deflate", code: result, stream: stream)
                }
                written += room - Int(stream.pointee.avail_out)
            } while stream.pointee.avail_in > 0 || stream.pointee.avail_out == 0
            consumed += chunk
        } while consumed < payload.count

        stream.pointee.next_in = nil
        stream.pointee.next_out = nil
        let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]
        var length = written
        if length >= 4, tail.withUnsafeBytes({ $0.elementsEqual(UnsafeRawBufferPointer(rebasing: output[(length - 4)..<length])) }) {
            length -= 4
        } else if length == 0 {
            // zlib emits nothing for a second flush in a row with no new
            // input (an empty message after an empty one). The stream is
            // byte-aligned after the previous flush, so the empty stored
            // block to append is 00 00 00 ff ff, which minus the tail is the
            // single 0x00 byte of RFC 7692 §7.2.3.6.
            output[0] = 0x00
            length = 1
        } else {
            throw ZlibError("deflate", code: Z_STREAM_ERROR, stream: nil)
        }
        return body(UnsafeRawBufferPointer(rebasing: output[0..<length]))
    }
}
