import TallyHTTP
import TallyNet
import TallyEngine
import TallyProtocol

/// A REST request turned into a sync operation on the loop thread, answered
/// by the core once the operation's effects are committed.
struct RESTCall: Sendable {
    enum Operation: Sendable {
        case getRecord(String)
        case records(prefix: String, after: String?, limit: Int)
        /// PUT, PATCH and DELETE of a record; answers with the envelope.
        case writeRecord(Write, key: String?, ifMatch: Bool)
        case getList(String, cursor: ListKey?, limit: Int?)
        case writeList(Write, key: String?)
        case changes(since: Int64, limit: Int)
        case publish(topic: String, data: JSONValue)
        /// POST /v1/records/{name}/advance
        case advance(String, Advance, key: String?)
        /// GET /v1/resolve/{code}
        case resolve(String)
        /// GET /v1/items?q=TEXT&limit=N
        case searchItems(String, limit: Int)
        /// GET /v1/items?after=NAME&limit=N
        case items(after: String?, limit: Int)
        /// GET /v1/workflows
        case workflows
    }

    let operation: Operation
    let responder: HTTPResponder
    /// Who the request's token named (admin in open mode).
    let actor: Actor
}

/// The REST face of PROTOCOL.md ("REST"): parsing requests into operations
/// and errors into responses.
enum REST {
    /// The HTTP status of a protocol error.
    static func status(for error: ProtocolError, ifMatch: Bool = false) -> HTTPStatus {
        switch error.code {
        case .notFound: .notFound
        case .conflict: ifMatch ? .preconditionFailed : .conflict
        case .illegalTransition, .insufficientStock: .conflict
        case .notANumber: .conflict
        case .tooLarge: .payloadTooLarge
        case .storageFailed, .shuttingDown, .unavailable: .serviceUnavailable
        case .resnapshot: HTTPStatus(410, "Gone")
        case .unauthorized: .unauthorized
        case .forbidden, .originNotAllowed, .hostNotAllowed: .forbidden
        case .unsupportedMediaType: HTTPStatus(415, "Unsupported Media Type")
        case .tooManyConnections: .serviceUnavailable
        default: .badRequest
        }
    }

    /// Seconds a client should wait before retrying after `storage_failed`:
    /// a full disk is not freed in a moment, and retries come back to a hub
    /// that is already short of room.
    static let storageRetryAfterSeconds = 5

    /// Seconds a client should wait before retrying after `unavailable`: the
    /// store reconnects to its database by itself, and a client with other
    /// hubs to try goes to one of them meanwhile.
    static let unavailableRetryAfterSeconds = 2

    static func response(for error: ProtocolError, ifMatch: Bool = false) -> HTTPResponse {
        var writer = MessageWriter()
        writer.value("error", error.json)
        var response = HTTPResponse.json(status(for: error, ifMatch: ifMatch), writer.finish())
        switch error.code {
        case .storageFailed: response.headers.set("Retry-After", String(storageRetryAfterSeconds))
        case .unavailable: response.headers.set("Retry-After", String(unavailableRetryAfterSeconds))
        default: break
        }
        return response
    }

    /// Decodes `%XX` escapes in one path part; nil when an escape is broken
    /// or the result is not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        guard text.contains("%") else { return String(text) }
        var bytes: [UInt8] = []
        var utf8 = text.utf8[...]
        while let byte = utf8.first {
            utf8 = utf8.dropFirst()
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard utf8.count >= 2, let high = hexValue(utf8.first!), let low = hexValue(utf8.dropFirst().first!) else { return nil }
            bytes.append(high << 4 | low)
            utf8 = utf8.dropFirst(2)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Query parameters, percent-decoded (`+` is a space in forms). A broken
    /// escape is refused rather than read as an empty value, which would
    /// turn `prefix=%FF` into "every record".
    static func query(_ request: HTTPRequest) throws(ProtocolError) -> [String: String] {
        var result: [String: String] = [:]
        for pair in (request.query ?? "").split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ text: Substring) throws(ProtocolError) -> String {
                guard let value = percentDecoded(Substring(String(text.map { $0 == "+" ? " " : $0 }))) else {
                    throw .badField(String(parts[0]), "the query parameter '\(pair)' has a broken %-escape or is not UTF-8; escape '%' as %25")
                }
                return value
            }
            result[try decoded(parts[0])] = try decoded(parts.count > 1 ? parts[1] : "")
        }
        return result
    }

    /// A validated record or list name from a path parameter (the HTTP
    /// parser has already decoded `%XX` escapes in the path).
    static func name(_ raw: String, field: String) throws(ProtocolError) -> String {
        try Names.validate(raw, field: field)
        return raw
    }

    /// The request body as JSON.
    static func body(_ request: HTTPRequest, limits: JSONLimits) throws(ProtocolError) -> JSONValue {
        guard !request.body.isEmpty else {
            throw ProtocolError(.badJSON, "the request has no body; send JSON", details: ["offset": 0])
        }
        do { return try JSONValue.parse(request.body, limits: limits) } catch { throw .badJSON(error) }
    }

    /// `If-Match: "N"` → N. `*` means "exists", which a version cannot say, so
    /// it is refused rather than ignored.
    static func ifMatch(_ request: HTTPRequest) throws(ProtocolError) -> Int64? {
        guard let raw = request.headers.values("If-Match").first else { return nil }
        var text = trimmed(raw)
        if text.hasPrefix("W/") { text.removeFirst(2) }
        guard text.count >= 3, text.first == "\"", text.last == "\"",
              let version = Int64(text.dropFirst().dropLast()), version >= 0 else {
            throw ProtocolError(.badField, "If-Match must be an ETag this hub sent, such as \"3\"",
                                details: ["field": "If-Match"])
        }
        return version
    }

    /// Without leading and trailing spaces and tabs (HTTP's OWS).
    static func trimmed(_ text: String) -> String {
        var slice = Substring(text)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }

    static func idempotencyKey(_ request: HTTPRequest) throws(ProtocolError) -> String? {
        guard let key = request.headers.values("Idempotency-Key").first.map(trimmed) else { return nil }
        guard !key.isEmpty, key.utf8.count <= Request.maxIdempotencyKeyBytes else {
            throw ProtocolError(.badField, "Idempotency-Key must be 1 to \(Request.maxIdempotencyKeyBytes) bytes",
                                details: ["field": "Idempotency-Key"])
        }
        return key
    }

    static func integer(_ text: String?, field: String, default value: Int64, range: ClosedRange<Int64>) throws(ProtocolError) -> Int64 {
        guard let text else { return value }
        guard let number = Int64(text), range.contains(number) else {
            throw .badField(field, "\(field) must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}
