import Testing
import TallyHTTP

/// A malformed request and the answer it must get.
struct RejectCase: Sendable, CustomTestStringConvertible {
    var name: String
    var input: [UInt8]
    var status: HTTPStatus
    /// A phrase the error message must contain, so it says what was wrong.
    var mentions: String

    init(_ name: String, _ input: String, _ status: HTTPStatus, mentions: String) {
        self.init(name, Array(input.utf8), status, mentions: mentions)
    }

    init(_ name: String, _ input: [UInt8], _ status: HTTPStatus, mentions: String) {
        self.name = name
        self.input = input
        self.status = status
        self.mentions = mentions
    }

    var testDescription: String { "\(name) → \(status.code)" }
}

/// Expects `input` to be refused with `status`, identically however it is split.
@discardableResult
func expectRejected(_ input: [UInt8], _ status: HTTPStatus, mentions: String? = nil, limits: HTTPLimits = HTTPLimits(),
                    sourceLocation: SourceLocation = #_sourceLocation) -> Outcome {
    let outcome = parse(input, limits: limits, sourceLocation: sourceLocation)
    #expect(outcome.failure?.status == status, "got \(String(describing: outcome.failure))", sourceLocation: sourceLocation)
    if let mentions, let message = outcome.failure?.message {
        #expect(message.contains(mentions), "message: \(message)", sourceLocation: sourceLocation)
    }
    return outcome
}

@Suite("HTTPRequestParser: rejected requests")
struct HTTPRequestParserErrorTests {
    static let syntaxErrors: [RejectCase] = [
        RejectCase("bare LF ending the request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", .badRequest, mentions: "bare LF"),
        RejectCase("bare LF ending a field line", "GET / HTTP/1.1\r\nHost: h\n\r\n", .badRequest, mentions: "bare LF"),
        RejectCase("bare LF ending the header section", "GET / HTTP/1.1\r\nHost: h\r\n\n", .badRequest, mentions: "bare LF"),
        RejectCase("bare LF before the request", "\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "bare LF"),
        RejectCase("CR without LF", "GET / HTTP/1.1\rHost: h\r\n\r\n", .badRequest, mentions: "CR not followed by LF"),
        RejectCase("lowercase protocol name", "GET / http/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "malformed HTTP version"),
        RejectCase("two-digit minor version", "GET / HTTP/1.10\r\nHost: h\r\n\r\n", .badRequest, mentions: "malformed HTTP version"),
        RejectCase("missing version", "GET /\r\nHost: h\r\n\r\n", .badRequest, mentions: "no HTTP version"),
        RejectCase("space after version", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", .badRequest, mentions: "space after the HTTP version"),
        RejectCase("two spaces before the version", "GET /  HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "two spaces"),
        RejectCase("empty target", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "empty request target"),
        RejectCase("request line starting with a space", " GET / HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "method token"),
        RejectCase("invalid method character", "GE(T / HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "in the method"),
        RejectCase("fragment in target", "GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "fragment"),
        RejectCase("control byte in target", "GET /a\u{01}b HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "request target"),
        RejectCase("target without leading slash", "GET a/b HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "starting with '/'"),
        RejectCase("authority-form target", "CONNECT hub:443 HTTP/1.1\r\nHost: hub\r\n\r\n", .badRequest, mentions: "starting with '/'"),
        RejectCase("asterisk target with GET", "GET * HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "only allowed with OPTIONS"),
        RejectCase("non-hex percent escape", "GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "percent-escape"),
        RejectCase("truncated percent escape", "GET /a%4 HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "percent-escape"),
        RejectCase("percent at the end of the path", "GET /a%?x HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "percent-escape"),
        RejectCase("escape decoding to invalid UTF-8", "GET /%FF HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "UTF-8"),
        RejectCase("whitespace before the colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", .badRequest, mentions: "between the header field name and the colon"),
        RejectCase("tab before the colon", "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", .badRequest, mentions: "between the header field name and the colon"),
        RejectCase("obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-Long: a\r\n  b\r\n\r\n", .badRequest, mentions: "line folding"),
        RejectCase("whitespace before the first field", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", .badRequest, mentions: "before the first header"),
        RejectCase("control character in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\u{01}b\r\n\r\n", .badRequest, mentions: "'X-A'"),
        RejectCase("NUL in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\u{0}b\r\n\r\n", .badRequest, mentions: "0x00"),
        RejectCase("DEL in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\u{7F}\r\n\r\n", .badRequest, mentions: "0x7F"),
        RejectCase("field line without colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", .badRequest, mentions: "without a colon"),
        RejectCase("empty field name", "GET / HTTP/1.1\r\n: h\r\n\r\n", .badRequest, mentions: "empty name"),
        RejectCase("invalid field name character", "GET / HTTP/1.1\r\nHo(st: h\r\n\r\n", .badRequest, mentions: "header field name"),
        RejectCase("HTTP/1.1 without Host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", .badRequest, mentions: "without a Host"),
        RejectCase("two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", .badRequest, mentions: "more than one Host"),
        RejectCase("too many empty lines first", String(repeating: "\r\n", count: 9) + "GET / HTTP/1.1\r\nHost: h\r\n\r\n", .badRequest, mentions: "empty lines"),
        RejectCase("TLS handshake", [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03], .badRequest, mentions: "TLS"),
        RejectCase("NUL bytes", [0, 0, 0, 0], .badRequest, mentions: "0x00"),
    ]

    @Test(arguments: syntaxErrors)
    func malformedSyntaxIsABadRequest(_ rule: RejectCase) {
        expectRejected(rule.input, rule.status, mentions: rule.mentions)
    }

    static let framingErrors: [RejectCase] = [
        RejectCase("Content-Length with letters", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1a\r\n\r\nx", .badRequest, mentions: "decimal"),
        RejectCase("negative Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", .badRequest, mentions: "decimal"),
        RejectCase("Content-Length with a sign", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", .badRequest, mentions: "decimal"),
        RejectCase("Content-Length with inner space", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\n", .badRequest, mentions: "decimal"),
        RejectCase("empty Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", .badRequest, mentions: "empty Content-Length"),
        RejectCase("differing Content-Length list", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 4\r\n\r\nabcd", .badRequest, mentions: "conflicting"),
        RejectCase("differing Content-Length lines", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", .badRequest, mentions: "conflicting"),
        // Request smuggling: each framing is fine alone, both together are refused.
        RejectCase("CL then TE", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", .badRequest, mentions: "both Content-Length and Transfer-Encoding"),
        RejectCase("TE then CL", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", .badRequest, mentions: "both Content-Length and Transfer-Encoding"),
        RejectCase("chunked twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", .badRequest, mentions: "more than once"),
        RejectCase("empty Transfer-Encoding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\n\r\n", .badRequest, mentions: "empty Transfer-Encoding"),
        RejectCase("Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", .badRequest, mentions: "HTTP/1.0"),
        RejectCase("gzip then chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", .notImplemented, mentions: "'gzip'"),
        RejectCase("gzip alone", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", .notImplemented, mentions: "'gzip'"),
        RejectCase("chunked then identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n", .notImplemented, mentions: "'identity'"),
        RejectCase("chunk size not hex", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .badRequest, mentions: "hexadecimal"),
        RejectCase("chunk size with junk", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4 x\r\nWiki\r\n0\r\n\r\n", .badRequest, mentions: "expected ';'"),
        RejectCase("chunk longer than declared", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWikipedia\r\n0\r\n\r\n", .badRequest, mentions: "longer than its declared size"),
        RejectCase("bare LF after chunk size", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\nWiki\r\n0\r\n\r\n", .badRequest, mentions: "bare LF"),
        RejectCase("bad trailer", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX : y\r\n\r\n", .badRequest, mentions: "colon"),
    ]

    @Test(arguments: framingErrors)
    func badFramingIsRefused(_ rule: RejectCase) {
        expectRejected(rule.input, rule.status, mentions: rule.mentions)
    }

    @Test(arguments: ["GET / HTTP/2.0\r\nHost: h\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "GET / HTTP/0.9\r\n\r\n", "GET / HTTP/3.0\r\n"])
    func otherMajorVersionsAreNotSupported(_ input: String) {
        expectRejected(Array(input.utf8), .httpVersionNotSupported, mentions: "not supported")
    }

    @Test func randomBinaryIsABadRequest() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<50 {
            var bytes: [UInt8] = []
            for _ in 0..<128 {
                state = state &* 6364136223846793005 &+ 1442695040888963407  // PCG-style LCG: deterministic
                bytes.append(UInt8(truncatingIfNeeded: state >> 56))
            }
            let outcome = expectRejected(bytes, .badRequest)
            #expect(outcome.consumed < bytes.count, "garbage is refused before the input ends")
        }
    }

    // MARK: - Limits, each detected on the byte that crosses it

    @Test func requestLineOverTheLimitIs414BeforeCRLF() {
        let limits = smallLimits(requestLine: 32)
        let input = Array(("GET /" + String(repeating: "a", count: 100)).utf8)  // no CRLF ever comes
        let outcome = expectRejected(input, .uriTooLong, mentions: "32 bytes", limits: limits)
        #expect(outcome.consumed == 33)
    }

    @Test func requestLineExactlyAtTheLimitIsAccepted() throws {
        let line = "GET /" + String(repeating: "a", count: 18) + " HTTP/1.1"
        #expect(line.utf8.count == 32)
        let outcome = parse(line + "\r\nHost: h\r\n\r\n", limits: smallLimits(requestLine: 32))
        #expect(outcome.request != nil)
        let longer = parse("GET /" + String(repeating: "a", count: 19) + " HTTP/1.1\r\nHost: h\r\n\r\n", limits: smallLimits(requestLine: 32))
        #expect(longer.failure?.status == .uriTooLong)
    }

    @Test func longMethodOrVersionAlsoCountsTowardTheRequestLine() {
        let limits = smallLimits(requestLine: 16)
        expectRejected(Array(String(repeating: "M", count: 40).utf8), .uriTooLong, limits: limits)
    }

    @Test func tooManyHeaderFieldsIs431AtTheFirstExtraField() {
        let limits = smallLimits(headerCount: 3, headerBytes: 4096)
        let head = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n"
        let input = Array((head + "C: 3\r\nD: 4\r\n\r\n").utf8)
        let outcome = expectRejected(input, .requestHeaderFieldsTooLarge, mentions: "more than 3 header fields", limits: limits)
        #expect(outcome.consumed == head.utf8.count + 1)
    }

    @Test func headerSectionOverTheLimitIs431BeforeItEnds() {
        let limits = smallLimits(headerBytes: 64)
        let input = Array(("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + String(repeating: "v", count: 500)).utf8)
        let outcome = expectRejected(input, .requestHeaderFieldsTooLarge, mentions: "64 bytes", limits: limits)
        #expect(outcome.consumed == "GET / HTTP/1.1\r\n".utf8.count + 65)
    }

    @Test func trailersAreLimitedLikeHeaders() {
        let limits = smallLimits(headerCount: 2, headerBytes: 4096)
        let input = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"
        expectRejected(Array(input.utf8), .requestHeaderFieldsTooLarge, mentions: "trailer", limits: limits)
    }

    @Test func contentLengthOverTheLimitIs413AsSoonAsTheFieldEnds() {
        let limits = smallLimits(body: 16)
        let head = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 17\r\n"
        let outcome = expectRejected(Array((head + "X-More: 1\r\n").utf8), .payloadTooLarge, limits: limits)
        #expect(outcome.consumed == head.utf8.count)
    }

    @Test func hugeContentLengthIs413NotACrash() {
        expectRejected(Array("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999999\r\n\r\n".utf8),
                       .payloadTooLarge)
    }

    @Test func contentLengthAtTheLimitIsAccepted() throws {
        let body = String(repeating: "b", count: 16)
        let outcome = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16\r\n\r\n" + body, limits: smallLimits(body: 16))
        #expect(try #require(outcome.request).bodyText == body)
    }

    @Test func largeBodyPathsHaveTheirOwnLimit() throws {
        var limits = smallLimits(body: 16)
        limits.largeBodies = [HTTPLimits.LargeBody(pathPrefix: "/v1/blobs/", maxBytes: 32)]
        let body = String(repeating: "b", count: 32)
        let big = parse("PUT /v1/blobs/ab HTTP/1.1\r\nHost: h\r\nContent-Length: 32\r\n\r\n" + body, limits: limits)
        #expect(try #require(big.request).bodyText == body)
        expectRejected(Array("PUT /v1/blobs/ab HTTP/1.1\r\nHost: h\r\nContent-Length: 33\r\n\r\n".utf8), .payloadTooLarge, limits: limits)
        // Every other path keeps the small limit, chunked or not.
        expectRejected(Array("PUT /v1/records/x HTTP/1.1\r\nHost: h\r\nContent-Length: 17\r\n\r\n".utf8), .payloadTooLarge, limits: limits)
        expectRejected(Array(("POST /v1/blob HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n" + String(repeating: "c", count: 17)).utf8),
                       .payloadTooLarge, limits: limits)
    }

    @Test func chunkedBodyOverTheLimitIs413AtTheChunkSize() {
        let limits = smallLimits(body: 16)
        let head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
        // 8 bytes so far; a chunk of 9 more crosses 16 as soon as its size is read.
        let outcome = expectRejected(Array((head + "9\r\n123456789\r\n0\r\n\r\n").utf8), .payloadTooLarge, limits: limits)
        #expect(outcome.consumed == head.utf8.count + 1)
        // A size with endless digits is refused without overflowing.
        expectRejected(Array(("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + String(repeating: "f", count: 40)).utf8),
                       .payloadTooLarge)
    }

    @Test func endlessChunkExtensionsAreRefused() {
        let input = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" + String(repeating: "x", count: 5000)
        let outcome = feed([Array(input.utf8)])
        #expect(outcome.failure?.status == .badRequest)
        #expect(outcome.failure?.message.contains("chunk size line") == true)
    }
}
