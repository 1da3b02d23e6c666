/// An HTTP/1.1 response, as the CLI's client reads it: status, header
/// fields in order, and the whole body.
struct HTTPClientResponse {
    var status: Int
    var reason: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    /// The first value of a header field (names compare ignoring ASCII case,
    /// RFC 9110 §5.1).
    func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// Why a response could not be read; the message names what was wrong.
struct HTTPResponseError: Error {
    var message: String
}

/// A pure, incremental HTTP/1.1 response parser (RFC 9112): fed bytes as
/// they arrive, it answers whether it needs more or has a whole response.
/// It knows nothing about sockets, so it is the same over plain TCP and TLS.
///
/// Framing follows RFC 9112 §6.3: a response to HEAD and 1xx/204/304 have
/// no body; else `Transfer-Encoding: chunked`, else `Content-Length`, else
/// the body runs until the connection closes (`finish()`).
struct HTTPResponseParser {
    enum Step {
        case needMore
        case complete(HTTPClientResponse)
    }

    /// The longest head (status line and fields) accepted.
    static let maxHeadBytes = 64 << 10

    private enum State {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
    }

    private let maxBodyBytes: Int
    private let noBody: Bool
    private var state = State.head
    private var buffer: [UInt8] = []
    private var response = HTTPClientResponse(status: 0, reason: "", headers: [], body: [])

    /// - Parameters:
    ///   - maxBodyBytes: a longer body is an error, not an allocation.
    ///   - isHeadRequest: the request was HEAD, so no body follows.
    init(maxBodyBytes: Int, isHeadRequest: Bool = false) {
        self.maxBodyBytes = maxBodyBytes
        self.noBody = isHeadRequest
    }

    /// Whether a body delimited by the connection's end is being read, so an
    /// EOF completes the response instead of truncating it.
    var readsUntilClose: Bool {
        if case .untilClose = state { return true }
        return false
    }

    /// Feeds bytes; `.complete` once the whole response is in (bytes after
    /// it are ignored: the client sends `Connection: close`).
    mutating func parse(_ bytes: some Collection<UInt8>) throws(HTTPResponseError) -> Step {
        buffer.append(contentsOf: bytes)
        var offset = 0
        defer { buffer.removeFirst(min(offset, buffer.count)) }
        while true {
            switch state {
            case .head:
                guard let end = Self.find(crlfcrlf, in: buffer, from: offset) else {
                    if buffer.count - offset > Self.maxHeadBytes {
                        throw HTTPResponseError(message: "the response head is longer than \(Self.maxHeadBytes) bytes")
                    }
                    return .needMore
                }
                try parseHead(buffer[offset..<end])
                offset = end + 4
                // 1xx responses are interim (RFC 9110 §15.2): skip and read the final one.
                if (100...199).contains(response.status) {
                    response = HTTPClientResponse(status: 0, reason: "", headers: [], body: [])
                    continue
                }
                try chooseFraming()
            case .fixed(let remaining):
                let take = min(remaining, buffer.count - offset)
                response.body.append(contentsOf: buffer[offset..<offset + take])
                offset += take
                if remaining - take == 0 { state = .done } else {
                    state = .fixed(remaining: remaining - take)
                    return .needMore
                }
            case .chunkSize:
                guard let end = Self.find(crlf, in: buffer, from: offset) else {
                    if buffer.count - offset > 1024 { throw HTTPResponseError(message: "a chunk-size line is too long") }
                    return .needMore
                }
                let line = String(decoding: buffer[offset..<end], as: UTF8.self)
                let digits = line.split(separator: ";", maxSplits: 1).first.map { $0.trimmingSpaces } ?? ""
                guard !digits.isEmpty, digits.count <= 15, let size = Int(digits, radix: 16), size >= 0 else {
                    throw HTTPResponseError(message: "bad chunk size '\(line)'")
                }
                offset = end + 2
                if size == 0 { state = .trailers } else {
                    guard response.body.count + size <= maxBodyBytes else { throw tooLong() }
                    state = .chunkData(remaining: size)
                }
            case .chunkData(let remaining):
                let take = min(remaining, buffer.count - offset)
                response.body.append(contentsOf: buffer[offset..<offset + take])
                offset += take
                if remaining - take == 0 { state = .chunkDataEnd } else {
                    state = .chunkData(remaining: remaining - take)
                    return .needMore
                }
            case .chunkDataEnd:
                guard buffer.count - offset >= 2 else { return .needMore }
                guard buffer[offset] == 13, buffer[offset + 1] == 10 else {
                    throw HTTPResponseError(message: "a chunk is not followed by CRLF")
                }
                offset += 2
                state = .chunkSize
            case .trailers:
                guard let end = Self.find(crlf, in: buffer, from: offset) else { return .needMore }
                let empty = end == offset
                offset = end + 2
                if empty { state = .done }
            case .untilClose:
                let count = buffer.count - offset
                guard response.body.count + count <= maxBodyBytes else { throw tooLong() }
                response.body.append(contentsOf: buffer[offset...])
                offset = buffer.count
                return .needMore
            case .done:
                return .complete(response)
            }
        }
    }

    /// The connection closed: the response, if a close ends it.
    mutating func finish() throws(HTTPResponseError) -> HTTPClientResponse {
        switch state {
        case .untilClose, .done:
            state = .done
            return response
        case .head:
            throw HTTPResponseError(message: buffer.isEmpty ? "the hub closed the connection without answering"
                                                            : "the hub closed the connection in the middle of the response head")
        default:
            throw HTTPResponseError(message: "the hub closed the connection before the whole response body arrived")
        }
    }

    private mutating func parseHead(_ bytes: ArraySlice<UInt8>) throws(HTTPResponseError) {
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)[...]
        guard let statusLine = lines.popFirst() else { throw HTTPResponseError(message: "empty response head") }
        // status-line = HTTP-version SP status-code SP [ reason-phrase ] (RFC 9112 §4)
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3,
              let status = Int(parts[1]), (100...999).contains(status) else {
            throw HTTPResponseError(message: "not an HTTP/1.1 status line: '\(statusLine.prefix(80))'")
        }
        response.status = status
        response.reason = parts.count == 3 ? String(parts[2]) : ""
        for line in lines {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw HTTPResponseError(message: "a header line has no name: '\(line.prefix(80))'")
            }
            response.headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingSpaces))
        }
    }

    private mutating func chooseFraming() throws(HTTPResponseError) {
        if noBody || response.status == 204 || response.status == 304 {
            state = .done
        } else if let coding = response.header("Transfer-Encoding") {
            guard coding.lowercased().split(separator: ",").last?.trimmingSpaces == "chunked" else {
                throw HTTPResponseError(message: "unsupported Transfer-Encoding '\(coding)'")
            }
            state = .chunkSize
        } else if let length = response.header("Content-Length") {
            guard let count = Int(length), count >= 0 else {
                throw HTTPResponseError(message: "bad Content-Length '\(length)'")
            }
            guard count <= maxBodyBytes else { throw tooLong() }
            response.body.reserveCapacity(count)
            state = count == 0 ? .done : .fixed(remaining: count)
        } else {
            state = .untilClose
        }
    }

    private func tooLong() -> HTTPResponseError {
        HTTPResponseError(message: "the response body is longer than \(maxBodyBytes) bytes")
    }

    private let crlf: [UInt8] = [13, 10]
    private let crlfcrlf: [UInt8] = [13, 10, 13, 10]

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard haystack.count - start >= needle.count else { return nil }
        var index = start
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == needle[0] {
                var match = true
                for offset in 1..<needle.count where haystack[index + offset] != needle[offset] {
                    match = false
                    break
                }
                if match { return index }
            }
            index += 1
        }
        return nil
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (HTTP's OWS).
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
