/// A response ready to serialize.
///
/// A plain value: handlers build it, the connection layer serializes it.
/// Framing (Content-Length, Connection) is added at serialization so a
/// handler cannot get it wrong.
public struct HTTPResponse: Sendable {
    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: HTTPStatus, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response; `body` is already-serialized JSON.
    public static func json(_ status: HTTPStatus, _ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "application/json")]), body: body)
    }

    /// A UTF-8 plain-text response, for health checks and metrics.
    public static func text(_ status: HTTPStatus, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "text/plain; charset=utf-8")]),
                     body: Array(text.utf8))
    }

    /// The error envelope `{"error":{"code":…,"message":…}}` used by every endpoint.
    ///
    /// Both strings are JSON-escaped (RFC 8259 §7), since messages may quote
    /// client input such as a header name or a path.
    public static func error(_ status: HTTPStatus, code: String, message: String) -> HTTPResponse {
        var body: [UInt8] = []
        body.reserveCapacity(32 + code.utf8.count + message.utf8.count)
        body.append(contentsOf: #"{"error":{"code":"#.utf8)
        appendJSONString(code, to: &body)
        body.append(contentsOf: #","message":"#.utf8)
        appendJSONString(message, to: &body)
        body.append(contentsOf: "}}".utf8)
        return json(status, body)
    }

    /// The error envelope for a request the parser refused; its status and
    /// message come from the error, the code is `bad_request`-style snake
    /// case of the status (e.g. `uri_too_long`).
    public static func error(_ error: HTTPParseError) -> HTTPResponse {
        .error(error.status, code: snakeCase(error.status.reason), message: error.message)
    }

    /// Wire bytes: status line, headers (adds Content-Length, and
    /// `Connection: close` when not keeping alive), blank line, body.
    public func serialize(keepAlive: Bool) -> [UInt8] {
        var buffer: [UInt8] = []
        serialize(keepAlive: keepAlive, headRequest: false, into: &buffer)
        return buffer
    }

    /// Appends the wire bytes to `buffer`, so a connection can gather several
    /// pipelined responses into one write.
    ///
    /// RFC 9112 §6.1–6.3 and RFC 9110 §8.6: a response to HEAD carries the
    /// Content-Length a GET would have had but no body (`headRequest`);
    /// 1xx, 204 and 304 responses carry no body and get no Content-Length
    /// ("A server MUST NOT send a Content-Length header field in any response
    /// with a status code of 1xx or 204"; for 304 it is optional). A 101 keeps
    /// the connection for the new protocol, so it never says `close`.
    ///
    /// Header names and values are written as given, except that bytes which
    /// would end the line (CR, LF) or are otherwise invalid controls are
    /// replaced by spaces: a value built from client input must not be able
    /// to inject a header or split the response.
    public func serialize(keepAlive: Bool, headRequest: Bool, into buffer: inout [UInt8]) {
        let noContent = status.forbidsContent
        let writesBody = !noContent && !headRequest
        var size = 64 + (writesBody ? body.count : 0)
        for field in headers.fields { size += field.name.utf8.count + field.value.utf8.count + 4 }
        buffer.reserveCapacity(buffer.count + size)

        buffer.append(contentsOf: "HTTP/1.1 ".utf8)
        buffer.append(contentsOf: String(status.code).utf8)
        buffer.append(ASCII.space)
        Self.appendFieldText(status.reason, to: &buffer)
        buffer.append(contentsOf: "\r\n".utf8)

        for field in headers.fields {
            Self.appendFieldText(field.name, to: &buffer)
            buffer.append(contentsOf: ": ".utf8)
            Self.appendFieldText(field.value, to: &buffer)
            buffer.append(contentsOf: "\r\n".utf8)
        }
        if !noContent && !headers.contains("Content-Length") {
            buffer.append(contentsOf: "Content-Length: ".utf8)
            buffer.append(contentsOf: String(body.count).utf8)
            buffer.append(contentsOf: "\r\n".utf8)
        }
        if !keepAlive && status.code != 101 && !headers.containsToken("Connection", "close") {
            buffer.append(contentsOf: "Connection: close\r\n".utf8)
        }
        buffer.append(contentsOf: "\r\n".utf8)
        if writesBody { buffer.append(contentsOf: body) }
    }

    /// Appends header text, replacing CR, LF, NUL and other controls (HTAB
    /// excepted) with SP; RFC 9110 §5.5 allows a recipient the same repair.
    static func appendFieldText(_ text: String, to buffer: inout [UInt8]) {
        for byte in text.utf8 {
            buffer.append(ASCII.isFieldValueChar(byte) ? byte : ASCII.space)
        }
    }

    /// Appends `text` as a JSON string literal, quotes included (RFC 8259 §7):
    /// `"` and `\` are escaped, control characters become `\u00XX`, and
    /// everything else, non-ASCII included, is copied as UTF-8.
    static func appendJSONString(_ text: String, to buffer: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        buffer.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(byte)
            case 0x00..<0x20:
                buffer.append(contentsOf: #"\u00"#.utf8)
                buffer.append(hex[Int(byte >> 4)])
                buffer.append(hex[Int(byte & 0x0F)])
            default:
                buffer.append(byte)
            }
        }
        buffer.append(UInt8(ascii: "\""))
    }

    /// "Request Header Fields Too Large" → "request_header_fields_too_large".
    static func snakeCase(_ reason: String) -> String {
        var result = ""
        var pendingSeparator = false
        for scalar in reason.unicodeScalars {
            if scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) {
                if pendingSeparator && !result.isEmpty { result.append("_") }
                pendingSeparator = false
                result.unicodeScalars.append(contentsOf: scalar.properties.lowercaseMapping.unicodeScalars)
            } else {
                pendingSeparator = true
            }
        }
        return result
    }
}
