import Testing
import TallyHTTP
@testable import TallyNet
import TallyServer

/// HTTP/1.1 spoken by hand over a raw socket.
@Suite struct HTTPServerTests {
    @Test func keepAliveServesTwoRequestsOnOneConnection() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let first = try raw.readResponse()
            #expect(first.status == 200)
            #expect(first.text == "hello")
            #expect(first.head.headers["Connection"] == nil)
            try raw.send("GET /world HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let second = try raw.readResponse()
            #expect(second.status == 200)
            #expect(second.text == "world")
            #expect(server.metricsSnapshot()[.connectionsAccepted] == 1)
            #expect(server.metricsSnapshot()[.httpRequests] == 2)
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\nGET /world HTTP/1.1\r\nHost: localhost\r\n\r\n"
                + "GET /missing HTTP/1.1\r\nHost: localhost\r\n\r\nGET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            #expect(try raw.readResponse().text == "hello")
            #expect(try raw.readResponse().text == "world")
            #expect(try raw.readResponse().status == 404)
            let last = try raw.readResponse()
            #expect(last.text == "hello")
            #expect(last.head.headers["Connection"] == "close")
            #expect(raw.waitForEOF())
        }
    }

    /// A request split into single bytes parses like a whole one.
    @Test func requestArrivingByteByByte() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            for byte in "GET /world HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8 { try raw.send([byte]) }
            #expect(try raw.readResponse().text == "world")
        }
    }

    @Test func connectionCloseIsHonoured() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.text == "hello")
            #expect(response.head.headers["Connection"] == "close")
            #expect(raw.waitForEOF())
        }
    }

    @Test(arguments: [
        RawRequest("garbage", "garbage\r\n\r\n"),
        RawRequest("control bytes", "\u{01}\u{02}\u{03} nonsense\r\n\r\n"),
        RawRequest("bare LF", "GET /hello HTTP/1.1\nHost: x\n\n"),
        RawRequest("space before colon", "GET /hello HTTP/1.1\r\nHost : x\r\n\r\n"),
    ])
    func garbageGetsA400JSONAndTheConnectionCloses(request: RawRequest) throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send(request.text)
            let response = try raw.readResponse()
            #expect(response.status == 400)
            #expect(response.head.headers["Content-Type"] == "application/json")
            #expect(response.text.hasPrefix(#"{"error":{"code":"#))
            #expect(response.head.headers["Connection"] == "close")
            #expect(raw.waitForEOF())
        }
    }

    /// The status for a bad request follows the parser's verdict.
    @Test func requestLineTooLongIs414() throws {
        try withServer(testConfiguration { $0.httpLimits.maxRequestLineBytes = 100 }, TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /" + String(repeating: "a", count: 200) + " HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.status == 414)
            #expect(response.text.contains("uri_too_long"))
        }
    }

    @Test func plainGetToAWebSocketRouteIs426() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("GET /ws HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.status == 426)
            #expect(response.head.headers["Upgrade"] == "websocket")
            #expect(response.head.headers["Sec-WebSocket-Version"] == "13")
            #expect(response.head.headers["Content-Type"] == "application/json")
            #expect(response.text.contains("upgrade_required"))
            // The connection stays usable.
            try raw.send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try raw.readResponse().text == "hello")
        }
    }

    @Test(arguments: [
        (RawRequest("POST", handshake(method: "POST", extra: "Content-Length: 0\r\n")), 405),
        (RawRequest("Connection without Upgrade", handshake(connection: "keep-alive")), 400),
        (RawRequest("bad key", handshake(key: "short")), 400),
        (RawRequest("version 8", handshake(version: "8")), 426),
        (RawRequest("HTTP/1.0", handshake(httpVersion: "1.0")), 400),
    ])
    func invalidHandshakesAreRefused(request: RawRequest, status: Int) throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send(request.text)
            let response = try raw.readResponse()
            #expect(response.status == status, "\(response.text)")
            #expect(response.head.headers["Content-Type"] == "application/json")
            #expect(raw.waitForEOF())
            #expect(server.metricsSnapshot()[.webSocketUpgrades] == 0)
        }
    }

    @Test func requestBodyIsRead() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            // The body must be consumed, or it would be read as the next request.
            try raw.send("POST /hello HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nabcde"
                + "GET /world HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try raw.readResponse().text == "hello")
            #expect(try raw.readResponse().text == "world")
        }
    }

    /// RFC 9110 §9.3.2: a response to HEAD has the headers a GET would get
    /// and no content; a body would be read as the next response.
    @Test func headResponseHasNoBody() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("HEAD /hello HTTP/1.1\r\nHost: localhost\r\n\r\nGET /world HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let head = try raw.readResponse(bodyless: true)
            #expect(head.status == 200)
            #expect(head.head.headers["Content-Length"] == "5")
            // The next bytes must be the second response, not "hello".
            let next = try raw.readResponse()
            #expect(next.status == 200)
            #expect(next.text == "world")
        }
    }

    /// RFC 9110 §10.1.1: a client sending `Expect: 100-continue` waits for
    /// `100 Continue` before the body (curl for a second, others longer).
    @Test func expectContinueIsAnswered() throws {
        try withServer(testConfiguration(), TestApp()) { server, _ in
            let raw = try RawSocket(port: server.port)
            defer { raw.close() }
            try raw.send("POST /hello HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            let interim = try raw.readResponse(timeoutMillis: 1_000, bodyless: true)
            #expect(interim.status == 100)
            try raw.send("abcde")
            let final = try raw.readResponse()
            #expect(final.status == 200)
            #expect(final.text == "hello")
        }
    }

    // MARK: The hub's routes

    @Test func hubHealthz() throws {
        try withHub { hub, _ in
            let raw = try RawSocket(port: hub.port)
            defer { raw.close() }
            try raw.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try raw.readResponse()
            #expect(response.status == 200)
            #expect(response.head.headers["Content-Type"] == "application/json")
            #expect(response.text == #"{"status":"ok"}"#)
        }
    }

    @Test func hubUnknownPathIs404AndWrongMethodIs405() throws {
        try withHub { hub, _ in
            let raw = try RawSocket(port: hub.port)
            defer { raw.close() }
            try raw.send("GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let missing = try raw.readResponse()
            #expect(missing.status == 404)
            #expect(missing.text.contains("not_found"))
            try raw.send("POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
            let wrong = try raw.readResponse()
            #expect(wrong.status == 405)
            let allow = wrong.head.headers["Allow"] ?? ""
            #expect(allow.split(separator: ",").map { String($0).trimmingSpaces }.contains("GET"), "Allow: \(allow)")
            #expect(!allow.contains("POST"))
        }
    }

    @Test func hubWithoutEchoHasNoEchoRoute() throws {
        try withHub({ $0.echo = false }) { hub, _ in
            let raw = try RawSocket(port: hub.port)
            defer { raw.close() }
            try raw.send("GET /echo HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try raw.readResponse().status == 404)
        }
    }
}

/// A hand-written request with a short name for test output.
struct RawRequest: Sendable, CustomTestStringConvertible {
    let name: String
    let text: String
    init(_ name: String, _ text: String) { self.name = name; self.text = text }
    var testDescription: String { name }
}

/// An opening handshake for /ws with one part changed.
func handshake(method: String = "GET", httpVersion: String = "1.1", connection: String = "Upgrade",
               key: String = "dGhlIHNhbXBsZSBub25jZQ==", version: String = "13", extra: String = "") -> String {
    "\(method) /ws HTTP/\(httpVersion)\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: \(connection)\r\n"
        + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: \(version)\r\n\(extra)\r\n"
}
