import Testing
@testable import TallyNet

@Suite struct WebSocketURLTests {
    @Test func plainWebSocketURL() throws {
        let url = try WebSocketURL("ws://example.com/chat")
        #expect(!url.secure)
        #expect(url.host == "example.com")
        #expect(url.port == 80)
        #expect(url.requestTarget == "/chat")
        #expect(url == (try WebSocketURL("http://example.com:80/chat")).withSecure(false))
        #expect(url.hostHeader == "example.com")
    }

    @Test func secureURLDefaultsTo443AndRootPath() throws {
        let url = try WebSocketURL("wss://example.com")
        #expect(url.secure)
        #expect(url.port == 443)
        #expect(url.requestTarget == "/")
        #expect(url.hostHeader == "example.com")
    }

    @Test(arguments: [
        ("http://h/x", false, 80),
        ("https://h/x", true, 443),
        ("ws://h/x", false, 80),
        ("wss://h/x", true, 443),
        ("WSS://h/x", true, 443),
        ("Http://h/x", false, 80),
    ])
    func schemes(text: String, secure: Bool, port: Int) throws {
        let url = try WebSocketURL(text)
        #expect(url.secure == secure)
        #expect(url.port == port)
        #expect(url.host == "h")
        #expect(url.requestTarget == "/x")
    }

    @Test func explicitPortAndHostHeader() throws {
        let url = try WebSocketURL("ws://127.0.0.1:8080/v1/ws")
        #expect(url.host == "127.0.0.1")
        #expect(url.port == 8080)
        #expect(url.hostHeader == "127.0.0.1:8080")
        // The default port is left out of Host (RFC 9112 §3.2), also when spelled out.
        #expect(try WebSocketURL("wss://h:443/").hostHeader == "h")
        #expect(try WebSocketURL("ws://h:80/").hostHeader == "h")
        #expect(try WebSocketURL("wss://h:80/").hostHeader == "h:80")
    }

    @Test func queryAndFragment() throws {
        #expect(try WebSocketURL("ws://h/v1/ws?token=abc&x=1").requestTarget == "/v1/ws?token=abc&x=1")
        #expect(try WebSocketURL("ws://h?x=1").requestTarget == "/?x=1")
        #expect(try WebSocketURL("ws://h:81?x=1").port == 81)
        // The fragment never goes on the wire (RFC 6455 §3).
        #expect(try WebSocketURL("ws://h/p?q=1#frag").requestTarget == "/p?q=1")
        #expect(try WebSocketURL("ws://h#frag").requestTarget == "/")
    }

    @Test func ipv6Literals() throws {
        let url = try WebSocketURL("ws://[::1]:9000/p")
        #expect(url.host == "::1")
        #expect(url.port == 9000)
        #expect(url.requestTarget == "/p")
        #expect(url.hostHeader == "[::1]:9000")
        #expect(url.isLoopback)

        let noPort = try WebSocketURL("wss://[2001:db8::7]/")
        #expect(noPort.host == "2001:db8::7")
        #expect(noPort.port == 443)
        #expect(noPort.hostHeader == "[2001:db8::7]")
        #expect(!noPort.isLoopback)
    }

    @Test(arguments: [
        "ws://h:0/", "ws://h:65536/", "ws://h:abc/", "ws://h:/", "ws://h:-1/", "ws://[::1]:99999/",
    ])
    func badPorts(text: String) {
        #expect(throws: ClientError.self) { try WebSocketURL(text) }
    }

    @Test(arguments: [
        "ws:///path", "ws://", "ws://:80/", "ws://?x=1", "ws://[]:80/", "wss://#f",
    ])
    func missingHost(text: String) {
        #expect(throws: ClientError.self) { try WebSocketURL(text) }
    }

    @Test(arguments: [
        "ftp://h/", "h:80/ws", "//h/ws", "", "ws:/h/", "ws://user:pw@h/", "ws://[::1/", "ws://[::1]x/",
    ])
    func rejected(text: String) {
        #expect(throws: ClientError.self) { try WebSocketURL(text) }
    }

    @Test func errorsSayWhatIsWrong() {
        do {
            _ = try WebSocketURL("ws://h:70000/")
            Issue.record("accepted port 70000")
        } catch {
            guard case .invalidURL(let message) = error else {
                Issue.record("wrong error \(error)")
                return
            }
            #expect(message.contains("70000"))
            #expect(error.description.hasPrefix("invalid URL"))
        }
    }

    @Test(arguments: [
        ("ws://localhost/", true),
        ("ws://localhost:9000/", true),
        ("ws://127.0.0.1/", true),
        ("ws://127.1.2.3:80/", true),
        ("ws://[::1]/", true),
        ("wss://example.com/", false),
        ("ws://10.0.0.1/", false),
        ("ws://128.0.0.1/", false),
        ("ws://[::2]/", false),
    ])
    func loopback(text: String, expected: Bool) throws {
        #expect(try WebSocketURL(text).isLoopback == expected)
    }

    /// `isLoopback` decides whether tokens may travel in clear text; a DNS
    /// name that merely starts with "127." can resolve anywhere.
    @Test(arguments: ["ws://127.attacker.example/", "ws://127.0.0.1.nip.io/", "ws://localhost.attacker.example/"])
    func hostNamesThatOnlyLookLikeLoopbackAreNotLoopback(text: String) throws {
        #expect(try WebSocketURL(text).isLoopback == false)
    }
}

extension WebSocketURL {
    func withSecure(_ secure: Bool) -> WebSocketURL {
        var copy = self
        copy.secure = secure
        return copy
    }
}
