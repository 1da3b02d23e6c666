import Testing
@testable import TallyHTTP

@Suite("HTTPRequestParser: well-formed requests")
struct HTTPRequestParserTests {
    @Test func simpleGet() throws {
        let input = "GET /healthz HTTP/1.1\r\nHost: hub.local\r\nUser-Agent: curl/8.5\r\n\r\n"
        let outcome = parse(input)
        let request = try #require(outcome.request)
        #expect(request.method == "GET")
        #expect(request.target == "/healthz")
        #expect(request.path == "/healthz")
        #expect(request.query == nil)
        #expect(request.version == .http1_1)
        #expect(request.headers == HTTPHeaders([("Host", "hub.local"), ("User-Agent", "curl/8.5")]))
        #expect(request.body.isEmpty)
        #expect(request.keepAlive)
        #expect(outcome.consumed == input.utf8.count)
        #expect(outcome.endedIdle)
    }

    @Test func pipelinedRequestsInOneBuffer() {
        let first = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
        let second = "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
        let third = "DELETE /c HTTP/1.1\r\nHost: h\r\n\r\n"
        let outcome = parse(first + second + third + "GET /d HTT")
        #expect(outcome.failure == nil)
        #expect(outcome.requests.map(\.method) == ["GET", "POST", "DELETE"])
        #expect(outcome.requests.map(\.path) == ["/a", "/b", "/c"])
        #expect(outcome.requests[1].bodyText == "hello")
        // The partial fourth request is held, so the parser is not idle.
        #expect(!outcome.endedIdle)
    }

    @Test func parseStopsAtTheEndOfOneRequest() throws {
        let first = Array("GET /a HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
        let input = first + Array("GET /b HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
        var parser = HTTPRequestParser()
        let (consumed, result) = input.withUnsafeBytes { parser.parse($0) }
        #expect(consumed == first.count)
        guard case .request(let request) = result else { Issue.record("expected a request"); return }
        #expect(request.path == "/a")
        #expect(parser.isIdle)
    }

    @Test func bodyByContentLength() throws {
        let request = try #require(parse("PUT /v1/records/x HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n\r\n{\"a\":\"b\\r\"}\n").request)
        #expect(request.bodyText == "{\"a\":\"b\\r\"}\n")
    }

    @Test func repeatedIdenticalContentLengthIsAccepted() throws {
        let input = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc"
        #expect(try #require(parse(input).request).bodyText == "abc")
    }

    @Test func zeroContentLengthCompletesAtTheHeaders() throws {
        let outcome = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
        #expect(try #require(outcome.request).body.isEmpty)
        #expect(outcome.endedIdle)
    }

    @Test func chunkedBodyWithExtensionsAndTrailers() throws {
        let input = "POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "4;name=value\r\nWiki\r\n"
            + "5 ; a=\"quoted;x\" ;flag\r\npedia\r\n"
            + "e\r\n in\r\n\r\nchunks.\r\n"
            + "000\r\n"
            + "Expires: never\r\nX-Checksum: abc\r\n\r\n"
        let outcome = parse(input)
        let request = try #require(outcome.request)
        #expect(request.bodyText == "Wikipedia in\r\n\r\nchunks.")
        // Trailers are parsed and dropped.
        #expect(request.headers == HTTPHeaders([("Host", "h"), ("Transfer-Encoding", "chunked")]))
        #expect(outcome.consumed == input.utf8.count)
        #expect(outcome.endedIdle)
    }

    @Test func chunkedTransferCodingNameIsCaseInsensitive() throws {
        let input = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        #expect(try #require(parse(input).request).bodyText == "abc")
    }

    @Test func bytesAfterAnUpgradeRequestAreLeftUnconsumed() throws {
        let head = Array(("GET /v1/ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8)
        let frame: [UInt8] = [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
        let input = head + frame

        var parser = HTTPRequestParser()
        let (consumed, result) = input.withUnsafeBytes { parser.parse($0) }
        #expect(consumed == head.count)
        guard case .request(let request) = result else { Issue.record("expected a request"); return }
        #expect(request.headers.containsToken("Connection", "upgrade"))
        #expect(Array(input[consumed...]) == frame)

        // Fed one byte at a time, the request completes on the last byte of the head.
        var bytewise = HTTPRequestParser()
        for (index, byte) in head.enumerated() {
            let (used, result) = [byte].withUnsafeBytes { bytewise.parse($0) }
            #expect(used == 1)
            if case .request = result { #expect(index == head.count - 1) }
        }
    }

    @Test func pathIsPercentDecodedAndQueryKeptRaw() throws {
        let request = try #require(parse("GET /v1/records/a%2Fb%20c/caf%C3%A9?x=1&y=%41 HTTP/1.1\r\nHost: h\r\n\r\n").request)
        #expect(request.target == "/v1/records/a%2Fb%20c/caf%C3%A9?x=1&y=%41")
        #expect(request.path == "/v1/records/a/b c/café")
        #expect(request.query == "x=1&y=%41")
    }

    @Test func emptyQueryIsEmptyNotNil() throws {
        #expect(try #require(parse("GET /a? HTTP/1.1\r\nHost: h\r\n\r\n").request).query == "")
    }

    @Test func absoluteFormTargetKeepsThePath() throws {
        let request = try #require(parse("GET http://hub.example:8080/v1/x?q=1 HTTP/1.1\r\nHost: hub.example\r\n\r\n").request)
        #expect(request.path == "/v1/x")
        #expect(request.query == "q=1")
        let bare = try #require(parse("GET HTTPS://hub.example HTTP/1.1\r\nHost: hub.example\r\n\r\n").request)
        #expect(bare.path == "/")
    }

    @Test func asteriskFormForOptions() throws {
        let request = try #require(parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").request)
        #expect(request.path == "*")
    }

    @Test func fieldValuesAreTrimmedOfOptionalWhitespace() throws {
        let request = try #require(parse("GET / HTTP/1.1\r\nHost:h\r\nX-A: \t spaced  out \t\r\nX-Empty:\r\nX-Blank:   \r\n\r\n").request)
        #expect(request.headers["host"] == "h")
        #expect(request.headers["X-A"] == "spaced  out")
        #expect(request.headers["x-empty"] == "")
        #expect(request.headers["X-BLANK"] == "")
    }

    @Test func obsTextIsAllowedInFieldValues() throws {
        let input: [UInt8] = Array("GET / HTTP/1.1\r\nHost: h\r\nX-Name: ".utf8) + [0xC3, 0xA9] + Array("\r\n\r\n".utf8)
        #expect(try #require(parse(input).request).headers["X-Name"] == "é")
    }

    @Test func leadingEmptyLinesAreIgnored() throws {
        let outcome = parse("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
        #expect(try #require(outcome.request).path == "/")
    }

    @Test func anyMinorVersionOfHTTP1IsServed() throws {
        #expect(try #require(parse("GET / HTTP/1.2\r\nHost: h\r\n\r\n").request).version == HTTPVersion(major: 1, minor: 2))
        #expect(try #require(parse("GET / HTTP/1.0\r\n\r\n").request).version == .http1_0)
    }

    struct KeepAliveCase: Sendable, CustomTestStringConvertible {
        var version: String
        var connection: String?
        var keepAlive: Bool
        var testDescription: String { "\(version) Connection: \(connection ?? "(none)") → \(keepAlive)" }
    }

    @Test(arguments: [
        KeepAliveCase(version: "HTTP/1.1", connection: nil, keepAlive: true),
        KeepAliveCase(version: "HTTP/1.1", connection: "close", keepAlive: false),
        KeepAliveCase(version: "HTTP/1.1", connection: "Keep-Alive, CLOSE", keepAlive: false),
        KeepAliveCase(version: "HTTP/1.1", connection: "Upgrade", keepAlive: true),
        KeepAliveCase(version: "HTTP/1.0", connection: nil, keepAlive: false),
        KeepAliveCase(version: "HTTP/1.0", connection: "keep-alive", keepAlive: true),
        KeepAliveCase(version: "HTTP/1.0", connection: " Keep-Alive ", keepAlive: true),
        KeepAliveCase(version: "HTTP/1.0", connection: "keep-alive, close", keepAlive: false),
    ])
    func keepAliveRules(_ rule: KeepAliveCase) throws {
        let connection = rule.connection.map { "Connection: \($0)\r\n" } ?? ""
        let request = try #require(parse("GET / \(rule.version)\r\nHost: h\r\n\(connection)\r\n").request)
        #expect(request.keepAlive == rule.keepAlive)
    }

    @Test func isIdleTracksWhetherARequestHasBegun() {
        var parser = HTTPRequestParser()
        #expect(parser.isIdle)
        _ = Array("\r\n".utf8).withUnsafeBytes { parser.parse($0) }
        #expect(parser.isIdle, "an ignorable empty line is not a request")
        _ = Array("G".utf8).withUnsafeBytes { parser.parse($0) }
        #expect(!parser.isIdle)
        _ = Array("ET / HTTP/1.1\r\nHost: h\r\n\r\n".utf8).withUnsafeBytes { parser.parse($0) }
        #expect(parser.isIdle)
    }

    @Test func expectContinueIsReportedOnceWhileTheBodyIsPending() {
        var parser = HTTPRequestParser()
        let head = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        _ = Array(head.utf8).withUnsafeBytes { parser.parse($0) }
        let first = parser.takeExpectContinue(), second = parser.takeExpectContinue()
        #expect(first)
        #expect(!second, "reported once")
        let (_, result) = Array("ok".utf8).withUnsafeBytes { parser.parse($0) }
        guard case .request = result else { Issue.record("expected a request"); return }
        let afterwards = parser.takeExpectContinue()
        #expect(!afterwards)
    }

    @Test func noScratchMemoryIsHeldBetweenRequests() {
        var parser = HTTPRequestParser()
        let input = "POST /a/long/path HTTP/1.1\r\nHost: h\r\nX-Padding: \(String(repeating: "p", count: 500))\r\n"
            + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        let (_, result) = Array(input.utf8).withUnsafeBytes { parser.parse($0) }
        guard case .request = result else { Issue.record("expected a request"); return }
        #expect(parser.line.capacity == 0)
        #expect(parser.body.capacity == 0)
        #expect(parser.headers.fields.capacity == 0)
    }
}

@Suite("HTTPRequestParser: heads before bodies")
struct HTTPRequestParserHeadTests {
    /// The server screens a request (token, route, length) before reading a
    /// byte of its body: the head comes first, then the request.
    @Test func aBodyIsAnnouncedByItsHeadFirst() {
        var parser = HTTPRequestParser(reportsHeads: true)
        let head = Array("PUT /v1/blobs/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n".utf8)
        let (consumed, result) = (head + Array("hello".utf8)).withUnsafeBytes { parser.parse($0) }
        #expect(consumed == head.count)
        guard case .head(let announced) = result else { Issue.record("expected a head, got \(result)"); return }
        #expect(announced.method == "PUT" && announced.path == "/v1/blobs/x" && announced.body.isEmpty)
        #expect(announced.headers["Content-Length"] == "5")
        // 100 Continue is for the caller to send once it accepted the head.
        let continues = parser.takeExpectContinue()
        #expect(continues)
        let (rest, final) = Array("hello".utf8).withUnsafeBytes { parser.parse($0) }
        #expect(rest == 5)
        guard case .request(let request) = final else { Issue.record("expected the request, got \(final)"); return }
        #expect(request.body == Array("hello".utf8))
        var bare = request
        bare.body = []
        #expect(bare == announced)
    }

    @Test func requestsWithoutABodyHaveNoHead() {
        var parser = HTTPRequestParser(reportsHeads: true)
        let (_, result) = Array("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n".utf8).withUnsafeBytes { parser.parse($0) }
        guard case .request = result else { Issue.record("expected a request, got \(result)"); return }
        var quiet = HTTPRequestParser()
        let (_, plain) = Array("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx".utf8).withUnsafeBytes { quiet.parse($0) }
        guard case .request = plain else { Issue.record("a parser without reportsHeads reported \(plain)"); return }
    }
}
