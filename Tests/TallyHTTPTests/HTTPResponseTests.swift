import Testing
import TallyHTTP

@Suite("HTTPResponse")
struct HTTPResponseTests {
    func wire(_ response: HTTPResponse, keepAlive: Bool = true) -> String {
        String(decoding: response.serialize(keepAlive: keepAlive), as: UTF8.self)
    }

    @Test func jsonResponseBytes() {
        let response = HTTPResponse.json(.ok, Array(#"{"ok":true}"#.utf8))
        #expect(response.headers["content-type"] == "application/json")
        #expect(wire(response) == "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
    }

    @Test func connectionCloseWhenNotKeepingAlive() {
        #expect(wire(HTTPResponse(status: .notFound), keepAlive: false)
            == "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    }

    @Test func existingConnectionCloseIsNotRepeated() {
        let response = HTTPResponse(status: .ok, headers: HTTPHeaders([("Connection", "close")]))
        #expect(wire(response, keepAlive: false) == "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    }

    @Test func noContentHasNoLengthAndNoBody() {
        let response = HTTPResponse(status: .noContent, body: Array("ignored".utf8))
        #expect(wire(response) == "HTTP/1.1 204 No Content\r\n\r\n")
    }

    @Test func switchingProtocolsHasNoLengthBodyOrClose() {
        let response = HTTPResponse(status: .switchingProtocols, headers: HTTPHeaders([
            ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ]))
        #expect(wire(response, keepAlive: false) == "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            + "Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
    }

    @Test func givenContentLengthIsKept() {
        let response = HTTPResponse(status: .ok, headers: HTTPHeaders([("content-length", "3")]), body: Array("abc".utf8))
        #expect(wire(response) == "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc")
    }

    @Test func headResponseHasTheLengthButNoBody() {
        var buffer: [UInt8] = []
        HTTPResponse.text(.ok, "hello").serialize(keepAlive: true, headRequest: true, into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self)
            == "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n\r\n")
    }

    @Test func serializeIntoAppendsPipelinedResponses() {
        var buffer: [UInt8] = []
        HTTPResponse(status: .noContent).serialize(keepAlive: true, headRequest: false, into: &buffer)
        HTTPResponse.text(.ok, "x").serialize(keepAlive: false, headRequest: false, into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == "HTTP/1.1 204 No Content\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
    }

    @Test func headerValuesCannotSplitTheResponse() {
        let response = HTTPResponse(status: .ok, headers: HTTPHeaders([("X-Echo", "a\r\nSet-Cookie: evil=1")]))
        #expect(wire(response) == "HTTP/1.1 200 OK\r\nX-Echo: a  Set-Cookie: evil=1\r\nContent-Length: 0\r\n\r\n")
    }

    @Test func errorEnvelope() {
        let response = HTTPResponse.error(.notFound, code: "not_found", message: "no record 'a'")
        #expect(response.status == .notFound)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":{"code":"not_found","message":"no record 'a'"}}"#)
    }

    @Test func errorEnvelopeEscapesJSONStrings() {
        let response = HTTPResponse.error(.badRequest, code: "bad\"code", message: "say \"hi\" \\ path\nline\ttab\u{01}\u{1F} café ☃")
        #expect(String(decoding: response.body, as: UTF8.self)
            == #"{"error":{"code":"bad\"code","message":"say \"hi\" \\ path\u000aline\u0009tab\u0001\u001f café ☃"}}"#)
    }

    @Test func errorEnvelopeForAParseError() {
        let error = HTTPParseError(status: .requestHeaderFieldsTooLarge, message: "more than 100 header fields")
        let response = HTTPResponse.error(error)
        #expect(response.status.code == 431)
        #expect(String(decoding: response.body, as: UTF8.self)
            == #"{"error":{"code":"request_header_fields_too_large","message":"more than 100 header fields"}}"#)
    }

    @Test func textResponse() {
        let response = HTTPResponse.text(.ok, "ok\n")
        #expect(response.headers["Content-Type"] == "text/plain; charset=utf-8")
        #expect(response.body == Array("ok\n".utf8))
    }
}
