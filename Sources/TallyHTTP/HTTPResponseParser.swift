/// An incremental HTTP/1.1 response parser: a pure state machine over bytes,
/// the client-side twin of `HTTPRequestParser`.
///
/// The caller feeds whatever the socket (or TLS session) returned; a response
/// split anywhere, one byte at a time included, parses exactly as if it had
/// arrived whole. It never reads past the end of one response, so the bytes
/// after a `101 Switching Protocols` are left for the WebSocket decoder.
///
/// Framing follows RFC 9112 §6.3: a response to HEAD, a 1xx, 204 or 304 has
/// no body; else `Transfer-Encoding` ending in `chunked`, else
/// `Content-Length`, else the body runs until the connection closes (`finish()`).
/// Interim 1xx responses other than 101 (`100 Continue`, RFC 9110 §15.2) are
/// skipped and the final one is read.
///
/// Lines must end in CRLF, and field names must be tokens with the colon
/// right after them (RFC 9112 §5.1): the hub always writes that, and every
/// leniency is a way for two parsers to disagree on where a message ends.
/// Memory is bounded by `HTTPResponseLimits`, checked on the byte that
/// crosses each limit.
public struct HTTPResponseParser: Sendable {
    enum State: Sendable {
        case statusLine
        case headerLine
        case fixedBody(remaining: Int)
        case chunkSizeLine
        case chunkData(remaining: Int)
        case chunkDataCR
        case chunkDataLF
        case trailerLine
        case untilClose
        case failed(HTTPResponseParseError)
    }

    public let limits: HTTPResponseLimits
    let noBody: Bool
    let reportsHead: Bool
    var state = State.statusLine
    /// The line being read (status, field, chunk size or trailer), CR excluded.
    var line: [UInt8] = []
    var sawCR = false
    var headBytes = 0
    var fieldCount = 0
    var response = HTTPClientResponse(status: 0)

    /// - Parameters:
    ///   - limits: a response over one is a failure, not an allocation.
    ///   - isHeadRequest: the request was HEAD, so no body follows.
    ///   - reportsHead: return `.head` once the header section of a response
    ///     with a body is in (a WebSocket handshake only needs the head), and
    ///     for each interim 1xx response before the final one.
    public init(limits: HTTPResponseLimits = HTTPResponseLimits(), isHeadRequest: Bool = false,
                reportsHead: Bool = false) {
        self.limits = limits
        self.noBody = isHeadRequest
        self.reportsHead = reportsHead
    }

    /// Whether the body being read is delimited by the connection's end, so
    /// an EOF completes the response instead of truncating it.
    public var readsUntilClose: Bool {
        if case .untilClose = state { return true }
        return false
    }

    /// Consumes bytes up to the end of at most one response.
    ///
    /// - Returns: how many bytes were consumed and what they produced.
    ///   `.needMore` consumes everything; `.response` consumes up to the
    ///   response's last byte and leaves the parser ready for the next one;
    ///   after `.failure` every call returns the same failure.
    public mutating func parse(_ bytes: UnsafeRawBufferPointer) -> (consumed: Int, result: HTTPResponseParseResult) {
        if case .failed(let error) = state { return (0, .failure(error)) }
        guard !bytes.isEmpty else { return (0, .needMore) }
        return bytes.withMemoryRebound(to: UInt8.self) { consume($0) }
    }

    /// `parse` over an array slice.
    public mutating func parse(_ bytes: ArraySlice<UInt8>) -> (consumed: Int, result: HTTPResponseParseResult) {
        bytes.withUnsafeBytes { parse($0) }
    }

    /// The connection ended: the response when a close delimits its body,
    /// else a failure saying where the response was cut.
    public mutating func finish() -> HTTPResponseParseResult {
        switch state {
        case .untilClose:
            response.keepAlive = false
            return .response(complete())
        case .failed(let error):
            return .failure(error)
        case .statusLine where headBytes == 0 && line.isEmpty && !sawCR:
            return fail(.closedBeforeResponse, "the connection closed without a response")
        case .statusLine, .headerLine:
            return fail(.closedInHead, "the connection closed in the middle of the response head")
        case .fixedBody, .chunkSizeLine, .chunkData, .chunkDataCR, .chunkDataLF, .trailerLine:
            return fail(.closedInBody, "the connection closed before the whole response body arrived")
        }
    }

    // MARK: - The state machine

    mutating func consume(_ input: UnsafeBufferPointer<UInt8>) -> (consumed: Int, result: HTTPResponseParseResult) {
        var i = 0
        while i < input.count {
            switch state {
            case .fixedBody(let remaining):
                let take = min(remaining, input.count - i)
                response.body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i..<i + take]))
                i += take
                if take == remaining { return (i, .response(complete())) }
                state = .fixedBody(remaining: remaining - take)
            case .chunkData(let remaining):
                let take = min(remaining, input.count - i)
                response.body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i..<i + take]))
                i += take
                state = take == remaining ? .chunkDataCR : .chunkData(remaining: remaining - take)
            case .chunkDataCR, .chunkDataLF:
                let expected = { if case .chunkDataCR = state { return ASCII.cr } else { return ASCII.lf } }()
                guard input[i] == expected else {
                    return (i + 1, fail(.malformed, "a chunk is not followed by CRLF"))
                }
                i += 1
                if expected == ASCII.cr { state = .chunkDataLF } else { state = .chunkSizeLine }
            case .untilClose:
                let take = input.count - i
                let room = limits.maxBodyBytes - response.body.count
                guard take <= room else {
                    // Fails on the byte that crosses the limit, wherever the input was cut.
                    response.body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i..<i + room]))
                    return (i + room + 1, bodyTooLarge())
                }
                response.body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i...]))
                return (input.count, .needMore)
            case .failed(let error):
                return (i, .failure(error))
            case .statusLine, .headerLine, .chunkSizeLine, .trailerLine:
                let byte = input[i]
                i += 1
                if let result = lineByte(byte) { return (i, result) }
            }
        }
        return (i, .needMore)
    }

    /// One byte of a CRLF-terminated line; a result when the line ended
    /// something (a response, a head) or failed.
    mutating func lineByte(_ byte: UInt8) -> HTTPResponseParseResult? {
        let inHead: Bool
        switch state {
        case .statusLine, .headerLine: inHead = true
        default: inHead = false
        }
        if inHead || isTrailer {
            headBytes += 1
            if headBytes > limits.maxHeadBytes {
                return fail(.tooLarge, "the response head is longer than \(limits.maxHeadBytes) bytes")
            }
        } else if line.count >= limits.maxChunkLineBytes {
            return fail(.malformed, "a chunk-size line is too long")
        }
        if sawCR {
            guard byte == ASCII.lf else { return fail(.malformed, "a bare CR in the response") }
            sawCR = false
            let text = line
            line.removeAll(keepingCapacity: true)
            return endOfLine(text)
        }
        switch byte {
        case ASCII.cr: sawCR = true
        case ASCII.lf: return fail(.malformed, "a line of the response ends in a bare LF, not CRLF")
        default: line.append(byte)
        }
        return nil
    }

    var isTrailer: Bool {
        if case .trailerLine = state { return true }
        return false
    }

    mutating func endOfLine(_ text: [UInt8]) -> HTTPResponseParseResult? {
        switch state {
        case .statusLine: return statusLine(text)
        case .headerLine: return text.isEmpty ? endOfHead() : fieldLine(text)
        case .chunkSizeLine: return chunkSize(text)
        case .trailerLine:
            if text.isEmpty { return .response(complete()) }
            fieldCount += 1
            guard fieldCount <= limits.maxHeaderCount else {
                return fail(.tooLarge, "the response has more than \(limits.maxHeaderCount) header and trailer lines")
            }
            return nil
        default: return nil
        }
    }

    /// `status-line = HTTP-version SP status-code SP [ reason-phrase ]` (RFC 9112 §4).
    mutating func statusLine(_ text: [UInt8]) -> HTTPResponseParseResult? {
        let prefix = Array("HTTP/1.".utf8)
        let shown = String(decoding: text.prefix(80), as: UTF8.self)
        guard text.count >= 12, text.starts(with: prefix), ASCII.isDigit(text[7]), text[8] == ASCII.space,
              ASCII.isDigit(text[9]), ASCII.isDigit(text[10]), ASCII.isDigit(text[11]),
              text.count == 12 || text[12] == ASCII.space else {
            return fail(.malformed, "not an HTTP/1.1 status line: '\(shown)'")
        }
        let status = text[9..<12].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        // RFC 9110 §15: "Values outside the range 100..599 are invalid."
        guard (100...599).contains(status) else { return fail(.malformed, "not an HTTP/1.1 status line: '\(shown)'") }
        response.version = HTTPVersion(major: 1, minor: Int(text[7] - 0x30))
        response.status = status
        response.reason = text.count > 13 ? String(decoding: text[13...], as: UTF8.self) : ""
        state = .headerLine
        return nil
    }

    /// `field-line = field-name ":" OWS field-value OWS` (RFC 9112 §5).
    mutating func fieldLine(_ text: [UInt8]) -> HTTPResponseParseResult? {
        fieldCount += 1
        guard fieldCount <= limits.maxHeaderCount else {
            return fail(.tooLarge, "the response has more than \(limits.maxHeaderCount) header lines")
        }
        let shown = String(decoding: text.prefix(80), as: UTF8.self)
        guard let colon = text.firstIndex(of: ASCII.colon), colon > 0,
              text[..<colon].allSatisfy(ASCII.isTokenChar) else {
            return fail(.malformed, "a header line has no name: '\(shown)'")
        }
        var value = text[(colon + 1)...]
        while let first = value.first, ASCII.isWhitespace(first) { value.removeFirst() }
        while let last = value.last, ASCII.isWhitespace(last) { value.removeLast() }
        guard value.allSatisfy(ASCII.isFieldValueChar) else {
            return fail(.malformed, "a header value holds a control character: '\(shown)'")
        }
        response.headers.add(String(decoding: text[..<colon], as: UTF8.self), String(decoding: value, as: UTF8.self))
        return nil
    }

    /// Picks the body's framing (RFC 9112 §6.3) once the head is in.
    mutating func endOfHead() -> HTTPResponseParseResult? {
        let status = response.status
        if status < 200 && status != 101 {
            // Interim: read the final response after it.
            let interim = response
            response = HTTPClientResponse(status: 0)
            (headBytes, fieldCount, state) = (0, 0, .statusLine)
            return reportsHead ? .head(interim) : nil
        }
        let close = response.headers.containsToken("Connection", "close")
        response.keepAlive = response.version.minor >= 1 ? !close
                                                         : response.headers.containsToken("Connection", "keep-alive") && !close
        if noBody || status < 200 || status == 204 || status == 304 {
            return .response(complete())
        }
        if response.headers.contains("Transfer-Encoding") {
            let codings = response.headers.values("Transfer-Encoding").joined(separator: ",")
            let last = codings.split(separator: ",").last.map { String($0).trimmingOWS.lowercased() }
            guard last == "chunked" else {
                return fail(.malformed, "unsupported Transfer-Encoding '\(codings)'")
            }
            state = .chunkSizeLine
        } else if response.headers.contains("Content-Length") {
            let values = response.headers.values("Content-Length")
            let lengths = values.flatMap { $0.split(separator: ",", omittingEmptySubsequences: false) }
                .map { String($0).trimmingOWS }
            guard let text = lengths.first, !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy(ASCII.isDigit),
                  lengths.allSatisfy({ $0 == text }), let length = Int(text) else {
                return fail(.malformed, "bad Content-Length '\(values.joined(separator: ", "))'")
            }
            guard length <= limits.maxBodyBytes else { return bodyTooLarge() }
            if length == 0 { return .response(complete()) }
            response.body.reserveCapacity(length)
            state = .fixedBody(remaining: length)
        } else {
            response.keepAlive = false
            state = .untilClose
        }
        if reportsHead { return .head(response) }
        return nil
    }

    /// `chunk-size [ chunk-ext ] CRLF` (RFC 9112 §7.1); extensions ignored.
    mutating func chunkSize(_ text: [UInt8]) -> HTTPResponseParseResult? {
        let digits = text.prefix { $0 != ASCII.semicolon && !ASCII.isWhitespace($0) }
        var size = 0
        guard !digits.isEmpty, digits.count <= 15 else {
            return fail(.malformed, "bad chunk size '\(String(decoding: text.prefix(80), as: UTF8.self))'")
        }
        for byte in digits {
            guard let digit = ASCII.hexValue(byte) else {
                return fail(.malformed, "bad chunk size '\(String(decoding: text.prefix(80), as: UTF8.self))'")
            }
            size = size << 4 | Int(digit)
        }
        if size == 0 {
            state = .trailerLine
            return nil
        }
        guard response.body.count + size <= limits.maxBodyBytes else { return bodyTooLarge() }
        state = .chunkData(remaining: size)
        return nil
    }

    /// The response is whole: hands it out and starts over for the next one.
    mutating func complete() -> HTTPClientResponse {
        let done = response
        response = HTTPClientResponse(status: 0)
        (headBytes, fieldCount, state, sawCR) = (0, 0, .statusLine, false)
        line = []
        return done
    }

    mutating func bodyTooLarge() -> HTTPResponseParseResult {
        fail(.tooLarge, "the response body is longer than \(limits.maxBodyBytes) bytes")
    }

    mutating func fail(_ kind: HTTPResponseParseError.Kind, _ message: String) -> HTTPResponseParseResult {
        let error = HTTPResponseParseError(kind, message)
        state = .failed(error)
        line = []
        return .failure(error)
    }
}

extension String {
    /// Without leading and trailing spaces and tabs (HTTP's OWS).
    var trimmingOWS: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
