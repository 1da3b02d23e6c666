import CZlib

/// A zlib call that returned an error code, with zlib's own message.
///
/// Internal: the decoder turns it into a `WebSocketFailure` (1007 for
/// corrupt input, 1011 for resource failures); the encoder falls back to an
/// uncompressed message.
struct ZlibError: Error, Equatable {
    var function: String
    var code: Int32
    var message: String

    init(_ function: String, code: Int32, stream: UnsafeMutablePointer<z_stream>?) {
        self.function = function
        self.code = code
        if let text = stream?.pointee.msg {
            self.message = String(cString: text)
        } else {
            self.message = ZlibError.describe(code)
        }
    }

    var description: String { "\(function): \(message) (\(code))" }

    private static func describe(_ code: Int32) -> String {
        switch code {
        case Z_STREAM_ERROR: return "stream error"
        case Z_DATA_ERROR: return "data error"
        case Z_MEM_ERROR: return "out of memory"
        case Z_BUF_ERROR: return "buffer error"
        case Z_VERSION_ERROR: return "version mismatch"
        case Z_NEED_DICT: return "needs a preset dictionary"
        default: return "error"
        }
    }
}
