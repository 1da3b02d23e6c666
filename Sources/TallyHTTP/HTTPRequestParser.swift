/// An incremental HTTP/1.1 request parser: a pure state machine over bytes.
///
/// The connection layer feeds whatever the socket returned; the parser keeps
/// its place between calls, so a request split anywhere (one byte at a time
/// included) parses exactly as if it had arrived whole. It never reads past
/// the end of one request: the bytes that follow belong to the next pipelined
/// request (RFC 9112 §9.3.2) or, after an upgrade, to another protocol
/// (RFC 9110 §7.8), and the caller decides what to do with them.
///
/// Parsing is strict (RFC 9112 §2.2 lets a server reject what it cannot
/// parse unambiguously): lines end in CRLF, a bare LF is an error, obs-fold
/// and whitespace before a field colon are errors, and a message framed by
/// both Content-Length and Transfer-Encoding is refused, because every such
/// leniency is a way for two parsers to disagree on where a request ends
/// (request smuggling, RFC 9112 §11.2).
///
/// Memory is bounded by `HTTPLimits`, checked on the byte that crosses each
/// limit. Between requests the parser holds no heap storage: completing a
/// request moves the scratch buffers into it and starts from a fresh value.
public struct HTTPRequestParser: Sendable {
    /// Empty lines tolerated before a request line. RFC 9112 §2.2 asks to
    /// ignore "at least one"; a few cover clients that add a CRLF after a
    /// body, and the cap stops a client from keeping an idle connection busy
    /// with an endless stream of them.
    static let maxEmptyLines = 8
    /// Longest chunk-size line (size, extensions, no CRLF). Extensions are
    /// ignored but still arrive, so they need a bound of their own.
    static let maxChunkLineBytes = 4096
    /// Scratch sizes for a typical request: most lines and header counts
    /// fit, so the buffers do not grow step by step on every request.
    static let initialLineCapacity = 256
    static let initialFieldCapacity = 16

    let limits: HTTPLimits
    /// Report `.head` before reading a body (see `HTTPParseResult.head`).
    let reportsHeads: Bool
    var state: State = .idle

    // Scratch for the request being parsed. A fresh parser (which is what
    // completing a request resets to) holds none of them on the heap: empty
    // arrays and small strings are stored inline.
    /// Bytes of the current token, request line part or field line.
    var line: [UInt8] = []
    var emptyLines = 0
    var requestLineBytes = 0
    var method = ""
    var target = ""
    var path = ""
    var query: String?
    var version = HTTPVersion.http1_1
    var headers = HTTPHeaders()
    /// The name of the field line being read, once its colon was seen.
    var fieldName = ""
    /// Which framing field `fieldName` is, if any.
    var fieldKind: FramingField?
    /// Field lines and bytes in the current header or trailer section.
    var fieldCount = 0
    var sectionBytes = 0
    var inTrailers = false
    var hostCount = 0
    /// Connection options seen so far (RFC 9112 §9.3), for `keepAlive`.
    var connectionClose = false
    var connectionKeepAlive = false
    /// Whether the client sent `Expect: 100-continue`.
    var expectsContinue = false
    /// Why the target is unusable, reported once the version is known to be
    /// HTTP/1.x, so `PRI * HTTP/2.0` gets 505 rather than a complaint about `*`.
    var targetError: HTTPParseError?
    var contentLength: Int?
    /// Transfer codings from every Transfer-Encoding line, in order, or nil
    /// when the field is absent.
    var transferCodings: [String]?
    var body: [UInt8] = []
    var chunkSize = 0
    var chunkSizeDigits = 0
    var chunkLineBytes = 0
    var continueExpected = false

    /// - Parameter reportsHeads: stop after the header section of a request
    ///   that has a body and return `.head`, so the caller can refuse it
    ///   before the body is read.
    public init(limits: HTTPLimits = HTTPLimits(), reportsHeads: Bool = false) {
        self.limits = limits
        self.reportsHeads = reportsHeads
    }

    /// Consumes bytes up to the end of at most one request. Bytes after a
    /// complete request are not consumed (pipelining, or WebSocket frames that
    /// follow an upgrade request).
    ///
    /// - Returns: how many bytes were consumed and what they produced.
    ///   `.needMore` always consumes everything. `.request` consumes up to the
    ///   request's last byte and leaves the parser ready for the next one.
    ///   `.failure` consumes up to and including the byte that revealed the
    ///   error; after it the parser is stuck and every later call returns the
    ///   same failure with nothing consumed.
    public mutating func parse(_ bytes: UnsafeRawBufferPointer) -> (consumed: Int, result: HTTPParseResult) {
        if case .failed(let error) = state { return (0, .failure(error)) }
        guard !bytes.isEmpty else { return (0, .needMore) }
        return bytes.withMemoryRebound(to: UInt8.self) { consume($0) }
    }

    /// Whether the parser holds no part of a request, for idle timeouts:
    /// true between requests (empty lines that RFC 9112 §2.2 says to ignore
    /// do not count as a request), false once a request has begun or failed.
    public var isIdle: Bool {
        if case .idle = state { return true }
        return false
    }

    /// Returns true once per request when the client asked for
    /// `Expect: 100-continue` (RFC 9110 §10.1.1) and its body has not
    /// arrived yet: the connection should then write
    /// `HTTP/1.1 100 Continue\r\n\r\n`, or the client waits before sending it.
    public mutating func takeExpectContinue() -> Bool {
        defer { continueExpected = false }
        return continueExpected
    }

    // MARK: - The state machine

    /// Runs the state machine over `input`. Hot states (target, field values,
    /// bodies) take whole runs of bytes at a time; the rest step byte by byte.
    mutating func consume(_ input: UnsafeBufferPointer<UInt8>) -> (consumed: Int, result: HTTPParseResult) {
        let end = input.count
        var i = 0
        while i < end {
            let byte = input[i]
            switch state {
            case .idle:
                if byte == ASCII.cr {
                    state = .emptyLineLF
                    i += 1
                } else if ASCII.isTokenChar(byte) {
                    // One allocation sized for a typical line, instead of
                    // growing from empty on every request.
                    line.reserveCapacity(Self.initialLineCapacity)
                    state = .method  // the method state takes this byte
                } else if byte == 0x16 {
                    return (i + 1, fail(.badRequest, "received a TLS handshake on a plain-text HTTP port"))
                } else if byte == ASCII.lf {
                    return (i + 1, fail(.badRequest, "bare LF before the request line; lines must end in CRLF"))
                } else {
                    return (i + 1, fail(.badRequest, "a request must start with a method token, not \(ASCII.describe(byte))"))
                }

            case .emptyLineLF:
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF before the request line"))
                }
                emptyLines += 1
                guard emptyLines <= Self.maxEmptyLines else {
                    return (i + 1, fail(.badRequest, "more than \(Self.maxEmptyLines) empty lines before the request line"))
                }
                state = .idle
                i += 1

            case .method:
                let run = scan(input, from: i, while: ASCII.isTokenChar)
                if let stop = appendToRequestLine(input, i..<run) { return (stop, failRequestLineTooLong()) }
                i = run
                guard i < end else { break }
                if let stop = countRequestLineByte(at: i) { return (stop, failRequestLineTooLong()) }
                guard input[i] == ASCII.space else {
                    return (i + 1, fail(.badRequest, "invalid character \(ASCII.describe(input[i])) in the method"))
                }
                method = takeLine()
                state = .target
                i += 1

            case .target:
                let run = scan(input, from: i, while: ASCII.isTargetChar)
                if let stop = appendToRequestLine(input, i..<run) { return (stop, failRequestLineTooLong()) }
                i = run
                guard i < end else { break }
                let terminator = input[i]
                if terminator == ASCII.cr || terminator == ASCII.lf {
                    return (i + 1, fail(.badRequest, "the request line has no HTTP version (expected 'METHOD /path HTTP/1.1')"))
                }
                if let stop = countRequestLineByte(at: i) { return (stop, failRequestLineTooLong()) }
                switch terminator {
                case ASCII.space where line.isEmpty:
                    return (i + 1, fail(.badRequest, "empty request target (two spaces after the method)"))
                case ASCII.space:
                    do {
                        (path, query) = try Self.splitTarget(line, method: method)
                    } catch {
                        targetError = error
                    }
                    target = takeLine()
                    state = .version
                    i += 1
                case ASCII.hash:
                    return (i + 1, fail(.badRequest, "the request target must not contain a fragment ('#')"))
                default:
                    return (i + 1, fail(.badRequest, "invalid byte \(ASCII.describe(terminator)) in the request target"))
                }

            case .version:
                if byte == ASCII.cr {
                    if let error = parseVersion() { return (i + 1, fail(error)) }
                    state = .requestLineLF
                    i += 1
                    break
                }
                if let stop = countRequestLineByte(at: i) { return (stop, failRequestLineTooLong()) }
                switch byte {
                case ASCII.lf:
                    return (i + 1, fail(.badRequest, "bare LF after the request line; lines must end in CRLF"))
                case ASCII.space:
                    let message = line.isEmpty
                        ? "two spaces between the request target and the HTTP version"
                        : "unexpected space after the HTTP version in the request line"
                    return (i + 1, fail(.badRequest, message))
                default:
                    // "HTTP/1.1" is 8 bytes; anything longer cannot become valid.
                    guard byte > 0x20 && byte < 0x7F && line.count < 8 else {
                        return (i + 1, fail(.badRequest, "malformed HTTP version (expected 'HTTP/1.1')"))
                    }
                    line.append(byte)
                    i += 1
                }

            case .requestLineLF:
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF at the end of the request line"))
                }
                i += 1
                if let error = targetError { return (i, fail(error)) }
                state = .fieldLineStart

            case .fieldLineStart:
                switch byte {
                case ASCII.cr:
                    if let stop = countSectionByte(at: i) { return (stop, failSectionTooLarge()) }
                    state = .sectionEndLF
                    i += 1
                case ASCII.space, ASCII.tab:
                    // RFC 9112 §2.2 (whitespace after the start line) and §5.2
                    // (obs-fold) both allow rejecting with 400.
                    let message = fieldCount == 0 && !inTrailers
                        ? "whitespace before the first header field"
                        : "obsolete line folding (a field line starting with whitespace) is not allowed"
                    return (i + 1, fail(.badRequest, message))
                case ASCII.lf:
                    return (i + 1, fail(.badRequest, "bare LF in the header section; lines must end in CRLF"))
                case ASCII.colon:
                    return (i + 1, fail(.badRequest, "header field with an empty name"))
                default:
                    guard ASCII.isTokenChar(byte) else {
                        return (i + 1, fail(.badRequest, "invalid character \(ASCII.describe(byte)) in a header field name"))
                    }
                    if fieldCount == 0 && !inTrailers { headers.reserveCapacity(Self.initialFieldCapacity) }
                    fieldCount += 1
                    guard fieldCount <= limits.maxHeaderCount else {
                        return (i + 1, fail(.requestHeaderFieldsTooLarge,
                                            "more than \(limits.maxHeaderCount) \(inTrailers ? "trailer" : "header") fields"))
                    }
                    state = .fieldName  // the name state takes this byte
                }

            case .fieldName:
                let run = scan(input, from: i, while: ASCII.isTokenChar)
                if let stop = appendToSection(input, i..<run) { return (stop, failSectionTooLarge()) }
                i = run
                guard i < end else { break }
                if let stop = countSectionByte(at: i) { return (stop, failSectionTooLarge()) }
                switch input[i] {
                case ASCII.colon:
                    fieldKind = line.withUnsafeBufferPointer { FramingField(name: $0) }
                    fieldName = takeLine()
                    state = .fieldValue
                    i += 1
                case ASCII.space, ASCII.tab:
                    // RFC 9112 §5.1: "A server MUST reject, with a response
                    // status code of 400 (Bad Request), any received request
                    // message that contains whitespace between a header field
                    // name and colon."
                    return (i + 1, fail(.badRequest, "whitespace between the header field name and the colon"))
                case ASCII.cr, ASCII.lf:
                    return (i + 1, fail(.badRequest, "header field line without a colon"))
                default:
                    return (i + 1, fail(.badRequest, "invalid character \(ASCII.describe(input[i])) in a header field name"))
                }

            case .fieldValue:
                let run = scan(input, from: i, while: ASCII.isFieldValueChar)
                if let stop = appendToSection(input, i..<run) { return (stop, failSectionTooLarge()) }
                i = run
                guard i < end else { break }
                if let stop = countSectionByte(at: i) { return (stop, failSectionTooLarge()) }
                switch input[i] {
                case ASCII.cr:
                    state = .fieldLineLF
                    i += 1
                case ASCII.lf:
                    return (i + 1, fail(.badRequest, "bare LF in the header field '\(fieldName)'; lines must end in CRLF"))
                default:
                    return (i + 1, fail(.badRequest,
                                        "invalid control character \(ASCII.describe(input[i])) in the value of the header field '\(fieldName)'"))
                }

            case .fieldLineLF:
                if let stop = countSectionByte(at: i) { return (stop, failSectionTooLarge()) }
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF in the header field '\(fieldName)'"))
                }
                i += 1
                if let error = finishFieldLine() { return (i, fail(error)) }
                state = .fieldLineStart

            case .sectionEndLF:
                if let stop = countSectionByte(at: i) { return (stop, failSectionTooLarge()) }
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF at the end of the header section"))
                }
                i += 1
                if inTrailers { return (i, complete()) }
                switch startBody() {
                case .failure(let error): return (i, fail(error))
                case .complete: return (i, complete())
                case .body: if reportsHeads { return (i, .head(head())) }
                }

            case .body(let remaining):
                let count = min(remaining, end - i)
                body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i..<(i + count)]))
                i += count
                if count == remaining { return (i, complete()) }
                state = .body(remaining: remaining - count)

            case .chunkSize:
                if let stop = countChunkLineByte(at: i) { return (stop, failChunkLineTooLong()) }
                if let digit = ASCII.hexValue(byte) {
                    let (shifted, overflow) = chunkSize.multipliedReportingOverflow(by: 16)
                    chunkSize = shifted + digit
                    chunkSizeDigits += 1
                    let limit = limits.maxBodyBytes(target: target)
                    guard !overflow, chunkSize <= limit - body.count else {
                        return (i + 1, fail(.payloadTooLarge, "the chunked body is larger than \(limits.describeBodyLimit(target: target))"))
                    }
                    i += 1
                    break
                }
                guard chunkSizeDigits > 0 else {
                    return (i + 1, fail(.badRequest, "a chunk must start with its size in hexadecimal, not \(ASCII.describe(byte))"))
                }
                switch byte {
                case ASCII.cr:
                    state = .chunkSizeLF
                case ASCII.semicolon:
                    state = .chunkExtension(started: true)
                case ASCII.space, ASCII.tab:
                    state = .chunkExtension(started: false)
                case ASCII.lf:
                    return (i + 1, fail(.badRequest, "bare LF after a chunk size; lines must end in CRLF"))
                default:
                    return (i + 1, fail(.badRequest, "invalid character \(ASCII.describe(byte)) in a chunk size"))
                }
                i += 1

            case .chunkExtension(let started):
                // RFC 9112 §7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name
                // [ BWS "=" BWS chunk-ext-val ] ). Extensions are ignored, so
                // past the first ';' only the bytes' validity is checked.
                if let stop = countChunkLineByte(at: i) { return (stop, failChunkLineTooLong()) }
                switch byte {
                case ASCII.cr:
                    state = .chunkSizeLF
                case ASCII.lf:
                    return (i + 1, fail(.badRequest, "bare LF after a chunk extension; lines must end in CRLF"))
                case ASCII.semicolon:
                    state = .chunkExtension(started: true)
                case ASCII.space, ASCII.tab:
                    break
                default:
                    guard started else {
                        return (i + 1, fail(.badRequest, "expected ';' or CRLF after the chunk size, not \(ASCII.describe(byte))"))
                    }
                    guard ASCII.isFieldValueChar(byte) else {
                        return (i + 1, fail(.badRequest, "invalid byte \(ASCII.describe(byte)) in a chunk extension"))
                    }
                }
                i += 1

            case .chunkSizeLF:
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF after a chunk size"))
                }
                i += 1
                if chunkSize == 0 {
                    // The last chunk; trailer fields follow (RFC 9112 §7.1.2).
                    inTrailers = true
                    fieldCount = 0
                    sectionBytes = 0
                    state = .fieldLineStart
                } else {
                    state = .chunkData(remaining: chunkSize)
                }
                chunkSize = 0
                chunkSizeDigits = 0
                chunkLineBytes = 0

            case .chunkData(let remaining):
                let count = min(remaining, end - i)
                body.append(contentsOf: UnsafeBufferPointer(rebasing: input[i..<(i + count)]))
                i += count
                state = count == remaining ? .chunkDataCR : .chunkData(remaining: remaining - count)

            case .chunkDataCR:
                guard byte == ASCII.cr else {
                    return (i + 1, fail(.badRequest, "chunk data longer than its declared size (expected CRLF after it)"))
                }
                state = .chunkDataLF
                i += 1

            case .chunkDataLF:
                guard byte == ASCII.lf else {
                    return (i + 1, fail(.badRequest, "CR not followed by LF after chunk data"))
                }
                state = .chunkSize
                i += 1

            case .failed(let error):
                // Unreachable: `fail` returns at once and `parse` checks first.
                return (i, .failure(error))
            }
        }
        return (end, .needMore)
    }
}
