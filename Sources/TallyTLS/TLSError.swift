import COpenSSL

/// A TLS failure with OpenSSL's error queue rendered into the message.
///
/// A single string type at the module edge: callers log it or close the
/// connection; none of them branch on the OpenSSL reason code. The message
/// always says what Tally was doing (and which file, for configuration
/// errors) before OpenSSL's own text.
public struct TLSError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }

    /// An error for `what`, with the calling thread's OpenSSL error queue
    /// appended and thereby cleared.
    static func openSSL(_ what: String) -> TLSError {
        TLSError(OpenSSLErrorQueue.describe(what))
    }
}

/// The calling thread's OpenSSL error queue.
///
/// OpenSSL keeps errors per thread. Every call into libssl that can fail is
/// preceded by `clear()` so a stale entry (left by another session on this
/// loop thread, or by an OpenSSL function that pushes errors even when it
/// succeeds) is never reported as this call's cause.
enum OpenSSLErrorQueue {
    static func clear() {
        ERR_clear_error()
    }

    /// Removes every queued error and renders them oldest first, joined by
    /// "; ". Empty when nothing was queued.
    static func drain() -> String {
        var parts: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            parts.append(render(code))
        }
        return parts.joined(separator: "; ")
    }

    /// `what` followed by the drained queue, or just `what` if it is empty.
    static func describe(_ what: String) -> String {
        let queue = drain()
        return queue.isEmpty ? what : "\(what): \(queue)"
    }

    /// ERR_error_string_n's fixed-format text, e.g.
    /// "error:0A00010B:SSL routines::wrong version number".
    static func render(_ code: UInt) -> String {
        // The manual guarantees 256 bytes are enough for any code; the
        // output is always NUL-terminated within `count`.
        var buffer = [CChar](repeating: 0, count: 256)
        return buffer.withUnsafeMutableBufferPointer { raw -> String in
            guard let base = raw.baseAddress else { return "error:\(code)" }
            ERR_error_string_n(code, base, raw.count)
            return String(cString: base)
        }
    }
}
