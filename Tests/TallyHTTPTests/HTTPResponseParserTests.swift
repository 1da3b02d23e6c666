import Testing
import TallyHTTP

/// What feeding a response's bytes to a fresh parser produced.
struct ResponseOutcome: Equatable {
    var responses: [HTTPClientResponse] = []
    var heads: [HTTPClientResponse] = []
    var failure: HTTPResponseParseError?
    /// Bytes consumed in total.
    var consumed = 0
    /// Whether `finish()` (the connection's end) was called and what it gave.
    var atClose: HTTPResponseParseResult?

    var response: HTTPClientResponse? {
        failure == nil && responses.count == 1 ? responses[0] : nil
    }
}

/// Feeds `chunks` to one parser; `close` then ends the stream with `finish()`.
func feedResponse(_ chunks: [[UInt8]], limits: HTTPResponseLimits, headRequest: Bool, reportsHead: Bool,
                  close: Bool) -> ResponseOutcome {
    var parser = HTTPResponseParser(limits: limits, isHeadRequest: headRequest, reportsHead: reportsHead)
    var outcome = ResponseOutcome()
    for chunk in chunks {
        var offset = 0
        repeat {
            let (consumed, result) = parser.parse(chunk[offset...])
            offset += consumed
            outcome.consumed += consumed
            switch result {
            case .needMore:
                #expect(offset == chunk.count, "needMore must consume everything")
            case .head(let head):
                #expect(head.body.isEmpty)
                outcome.heads.append(head)
            case .response(let response):
                outcome.responses.append(response)
            case .failure(let error):
                outcome.failure = error
                // A failed parser stays failed.
                #expect(parser.parse([UInt8]("HTTP/1.1 200 OK\r\n".utf8)[...]).result == .failure(error))
                return outcome
            }
        } while offset < chunk.count
    }
    if close {
        let result = parser.finish()
        outcome.atClose = result
        if case .response(let response) = result { outcome.responses.append(response) }
        if case .failure(let error) = result { outcome.failure = error }
    }
    return outcome
}

/// Parses `text` whole, one byte at a time and split in two at every
/// position; all must agree.
func parseResponse(_ text: String, limits: HTTPResponseLimits = HTTPResponseLimits(), headRequest: Bool = false,
                   reportsHead: Bool = false, close: Bool = false,
                   sourceLocation: SourceLocation = #_sourceLocation) -> ResponseOutcome {
    let input = Array(text.utf8)
    func run(_ chunks: [[UInt8]]) -> ResponseOutcome {
        feedResponse(chunks, limits: limits, headRequest: headRequest, reportsHead: reportsHead, close: close)
    }
    let whole = run([input])
    #expect(run(input.map { [$0] }) == whole, "one byte at a time differs", sourceLocation: sourceLocation)
    for split in input.indices.dropFirst() {
        let halves = run([Array(input[..<split]), Array(input[split...])])
        #expect(halves == whole, "split at \(split) differs", sourceLocation: sourceLocation)
        if halves != whole { break }
    }
    return whole
}

@Suite("HTTPResponseParser")
struct HTTPResponseParserTests {
    @Test func contentLength() throws {
        let outcome = parseResponse("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
        let response = try #require(outcome.response)
        #expect(response.status == 201)
        #expect(response.reason == "Created")
        #expect(response.version == .http1_1)
        #expect(response.header("content-type") == "application/json")
        #expect(String(decoding: response.body, as: UTF8.self) == "{\"ok\":true}")
        #expect(response.keepAlive)
    }

    @Test func stopsAtTheEndOfOneResponse() throws {
        let first = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
        let bytes = Array((first + "HTTP/1.1 204 No Content\r\n\r\n").utf8)
        var parser = HTTPResponseParser()
        let (consumed, result) = parser.parse(bytes[...])
        #expect(consumed == first.utf8.count)
        guard case .response(let response) = result else { Issue.record("expected a response"); return }
        #expect(response.body == Array("hi".utf8))
        let (rest, next) = parser.parse(bytes[consumed...])
        #expect(rest == bytes.count - consumed)
        guard case .response(let second) = next else { Issue.record("expected the second response"); return }
        #expect(second.status == 204)
    }

    @Test func chunkedWithExtensionsAndTrailers() throws {
        let outcome = parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                    + "5;name=x\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: 1\r\n\r\n")
        let response = try #require(outcome.response)
        #expect(String(decoding: response.body, as: UTF8.self) == "hello, world!!!")
    }

    @Test func transferEncodingWinsOverContentLength() throws {
        let outcome = parseResponse("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
        #expect(try #require(outcome.response).body == Array("x".utf8))
    }

    @Test func bodyUntilClose() throws {
        let outcome = parseResponse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it", close: true)
        let response = try #require(outcome.response)
        #expect(response.body == Array("all of it".utf8))
        #expect(!response.keepAlive)
    }

    @Test func connectionCloseAndHTTP10() throws {
        #expect(try #require(parseResponse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").response).keepAlive == false)
        #expect(try #require(parseResponse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").response).keepAlive == false)
        let kept = try #require(parseResponse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n").response)
        #expect(kept.keepAlive && kept.version == .http1_0)
    }

    @Test func responsesWithoutBodies() throws {
        #expect(try #require(parseResponse("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n").response).body.isEmpty)
        #expect(try #require(parseResponse("HTTP/1.1 304 Not Modified\r\n\r\n").response).status == 304)
        let head = parseResponse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", headRequest: true)
        #expect(try #require(head.response).body.isEmpty)
    }

    @Test func interimResponsesAreSkipped() throws {
        let outcome = parseResponse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Content Too Large\r\nContent-Length: 2\r\n\r\nno")
        let response = try #require(outcome.response)
        #expect(response.status == 413 && response.body == Array("no".utf8))
        let reported = parseResponse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", reportsHead: true)
        #expect(reported.heads.map(\.status) == [100] && reported.responses.map(\.status) == [204])
    }

    @Test func switchingProtocolsEndsAtTheHeadAndLeavesTheFrames() throws {
        let head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        let bytes = Array(head.utf8) + [0x81, 0x02, 0x68, 0x69]
        var parser = HTTPResponseParser(reportsHead: true)
        let (consumed, result) = parser.parse(bytes[...])
        #expect(consumed == head.utf8.count)
        guard case .response(let response) = result else { Issue.record("expected the 101"); return }
        #expect(response.status == 101)
        #expect(response.headers.containsToken("Connection", "upgrade"))
        #expect(parseResponse(head).response?.status == 101)
    }

    @Test func reportsTheHeadBeforeTheBody() throws {
        let outcome = parseResponse("HTTP/1.1 426 Upgrade Required\r\nContent-Length: 4\r\n\r\nnope", reportsHead: true)
        #expect(outcome.heads.map(\.status) == [426])
        #expect(try #require(outcome.response).body == Array("nope".utf8))
    }

    @Test func reasonPhraseIsOptionalAndHeaderOrderKept() throws {
        let response = try #require(parseResponse("HTTP/1.1 200\r\nA: 1\r\nB:2\r\na:  3 \r\nContent-Length: 0\r\n\r\n").response)
        #expect(response.reason == "")
        #expect(response.headers.values("a") == ["1", "3"])
        #expect(response.header("B") == "2")
        let colons = try #require(parseResponse("HTTP/1.1 200 OK\r\nX-Time:  12:30:00 \t\r\nEmpty:\r\nContent-Length: 0\r\n\r\n").response)
        #expect(colons.header("x-time") == "12:30:00" && colons.header("Empty") == "")
        #expect(try #require(parseResponse("HTTP/1.0 426 Upgrade  Required\r\n\r\n", close: true).response).reason
            == "Upgrade  Required")
    }

    @Test(arguments: [
        ("HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1 099 OK\r\n\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1 600 High\r\n\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1 abc OK\r\n\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1\r\n\r\n", "not an HTTP/1.1 status line"),
        ("ICY 200 OK\r\n\r\n", "not an HTTP/1.1 status line: 'ICY 200 OK'"),
        ("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "a header line has no name: 'no colon here'"),
        ("SSH-2.0-OpenSSH\r\n", "not an HTTP/1.1 status line"),
        ("HTTP/1.1 200 OK\r\n: empty\r\n\r\n", "a header line has no name"),
        ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "a header line has no name"),
        ("HTTP/1.1 200 OK\r\nA: x\rB\r\n\r\n", "a bare CR"),
        ("HTTP/1.1 200 OK\nA: x\r\n\r\n", "bare LF"),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length '-1'"),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "bad Content-Length"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding 'gzip'"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size 'zz'"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX", "a chunk is not followed by CRLF"),
    ])
    func malformed(input: String, message: String) throws {
        let failure = try #require(parseResponse(input).failure)
        #expect(failure.kind == .malformed)
        #expect(failure.message.contains(message), "\(failure.message)")
    }

    @Test func limits() throws {
        var small = HTTPResponseLimits(maxBodyBytes: 4)
        let fixed = try #require(parseResponse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", limits: small).failure)
        #expect(fixed == HTTPResponseParseError(.tooLarge, "the response body is longer than 4 bytes"))
        let chunked = parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\n", limits: small)
        #expect(chunked.failure?.kind == .tooLarge)
        let untilClose = parseResponse("HTTP/1.1 200 OK\r\n\r\nabcde", limits: small)
        #expect(untilClose.failure?.kind == .tooLarge)
        small.maxHeadBytes = 40
        let head = try #require(parseResponse("HTTP/1.1 200 OK\r\nX-Long: \(String(repeating: "a", count: 40))\r\n\r\n",
                                              limits: small).failure)
        #expect(head == HTTPResponseParseError(.tooLarge, "the response head is longer than 40 bytes"))
        small.maxHeaderCount = 2
        small.maxHeadBytes = 1000
        #expect(parseResponse("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", limits: small).failure?.kind == .tooLarge)
        small.maxChunkLineBytes = 8
        let chunkLine = parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;aaaaaaaaaaaa\r\n", limits: small)
        #expect(chunkLine.failure == HTTPResponseParseError(.malformed, "a chunk-size line is too long"))
    }

    @Test func truncatedResponses() {
        #expect(parseResponse("", close: true).failure?.kind == .closedBeforeResponse)
        #expect(parseResponse("HTTP/1.1 100 Continue\r\n\r\n", close: true).failure?.kind == .closedBeforeResponse)
        #expect(parseResponse("HTTP/1.1 200 OK\r\nContent-", close: true).failure?.kind == .closedInHead)
        #expect(parseResponse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", close: true).failure?.kind == .closedInBody)
        #expect(parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", close: true).failure?.kind
            == .closedInBody)
    }

    @Test func readsUntilCloseOnlyForUnframedBodies() {
        var parser = HTTPResponseParser()
        _ = parser.parse(Array("HTTP/1.1 200 OK\r\n\r\nab".utf8)[...])
        #expect(parser.readsUntilClose)
        var framed = HTTPResponseParser()
        _ = framed.parse(Array("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab".utf8)[...])
        #expect(!framed.readsUntilClose)
    }
}
