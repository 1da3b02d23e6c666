import Testing
@testable import TallyNet

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct ResponseHeadTests {
    static let switching = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"

    @Test func endOfHeadFindsTheBlankLine() {
        let head = bytes(Self.switching)
        #expect(ResponseHead.endOfHead(head) == head.count)
        // Frames that follow the head are not part of it.
        #expect(ResponseHead.endOfHead(head + [0x81, 0x00]) == head.count)
    }

    @Test func endOfHeadNeedsTheWholeBlankLine() {
        let head = bytes(Self.switching)
        for cut in 0..<head.count {
            #expect(ResponseHead.endOfHead(Array(head[..<cut])) == nil, "cut at \(cut)")
        }
        #expect(ResponseHead.endOfHead([]) == nil)
        #expect(ResponseHead.endOfHead(bytes("\r\n\r")) == nil)
        #expect(ResponseHead.endOfHead(bytes("\r\n\r\n")) == 4)
        // A lone LF LF is not the end (HTTP lines end in CRLF).
        #expect(ResponseHead.endOfHead(bytes("HTTP/1.1 200 OK\n\n")) == nil)
    }

    @Test func parsesStatusReasonAndHeaders() throws {
        let raw = bytes(Self.switching)
        let head = try ResponseHead.parse(raw[...])
        #expect(head.status == 101)
        #expect(head.reason == "Switching Protocols")
        #expect(head.headers.count == 3)
        #expect(head.headers["upgrade"] == "websocket")
        #expect(head.headers["CONNECTION"] == "Upgrade")
        #expect(head.headers["Sec-WebSocket-Accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func parsesASliceOfALargerBuffer() throws {
        let raw = bytes("HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}")
        let end = try #require(ResponseHead.endOfHead(raw))
        let head = try ResponseHead.parse(raw[..<end])
        #expect(head.status == 404)
        #expect(head.reason == "Not Found")
        #expect(head.headers["Content-Length"] == "2")
    }

    @Test func headerValuesAreTrimmedAndMayContainColons() throws {
        let head = try ResponseHead.parse(bytes("HTTP/1.1 200 OK\r\nX-Time:  12:30:00 \t\r\nEmpty:\r\n\r\n")[...])
        #expect(head.headers["X-Time"] == "12:30:00")
        #expect(head.headers["Empty"] == "")
    }

    @Test func repeatedHeadersAreKept() throws {
        let head = try ResponseHead.parse(bytes(
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Extensions: a\r\nSec-WebSocket-Extensions: b\r\n\r\n")[...])
        #expect(head.headers.values("Sec-WebSocket-Extensions") == ["a", "b"])
    }

    @Test func reasonMayBeEmptyOrHaveSpaces() throws {
        #expect(try ResponseHead.parse(bytes("HTTP/1.1 200\r\n\r\n")[...]).reason == "")
        #expect(try ResponseHead.parse(bytes("HTTP/1.0 426 Upgrade  Required\r\n\r\n")[...]).reason == "Upgrade  Required")
    }

    @Test(arguments: [
        RawRequest("empty", ""),
        RawRequest("blank lines only", "\r\n\r\n"),
        RawRequest("HTTP/2", "HTTP/2 200 OK\r\n\r\n"),
        RawRequest("not HTTP", "ICY 200 OK\r\n\r\n"),
        RawRequest("status not a number", "HTTP/1.1 abc OK\r\n\r\n"),
        RawRequest("status below 100", "HTTP/1.1 99 Low\r\n\r\n"),
        RawRequest("status above 599", "HTTP/1.1 600 High\r\n\r\n"),
        RawRequest("no status", "HTTP/1.1\r\n\r\n"),
        RawRequest("header without colon", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"),
    ])
    func malformedHeadsAreRejected(head: RawRequest) {
        #expect(throws: ResponseHead.Malformed.self) { try ResponseHead.parse(bytes(head.text)[...]) }
    }

    @Test func malformedMessagesQuoteTheLine() {
        do {
            _ = try ResponseHead.parse(bytes("HTTP/1.1 200 OK\r\nbroken\r\n\r\n")[...])
            Issue.record("accepted a header line without a colon")
        } catch {
            #expect(error.message.contains("broken"))
        }
    }
}
