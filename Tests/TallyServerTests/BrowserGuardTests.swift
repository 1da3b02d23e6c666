import Testing
import TallyHTTP
import TallyProtocol
@testable import TallyServer

/// `BrowserGuard`: the Origin and Host rules (README "Security").
@Suite("BrowserGuard")
struct BrowserGuardTests {
    static func request(_ method: String = "GET", host: String? = "127.0.0.1:8080", origin: String? = nil,
                        contentType: String? = nil) -> HTTPRequest {
        var headers = HTTPHeaders()
        if let host { headers.add("Host", host) }
        if let origin { headers.add("Origin", origin) }
        if let contentType { headers.add("Content-Type", contentType) }
        return HTTPRequest(method: method, target: "/v1/ws", path: "/v1/ws", query: nil, version: .http1_1,
                           headers: headers, body: [], keepAlive: true)
    }

    @Test func originsAreTheHubsOwnOrAllowed() {
        let guarded = BrowserGuard(hostRule: .any, allowedOrigins: ["https://App.Example:443"])
        func code(_ request: HTTPRequest, upgrade: Bool = true, tls: Bool = false) -> ErrorCode? {
            guarded.check(request, isTLS: tls, upgrade: upgrade)?.code
        }
        #expect(code(Self.request()) == nil)  // no Origin: not a browser
        #expect(code(Self.request(origin: "http://127.0.0.1:8080")) == nil)
        #expect(code(Self.request(origin: "HTTP://127.0.0.1:8080/")) == nil)
        #expect(code(Self.request(origin: "https://127.0.0.1:8080")) == .originNotAllowed)  // another scheme
        #expect(code(Self.request(origin: "https://127.0.0.1:8080"), tls: true) == nil)
        #expect(code(Self.request(origin: "http://127.0.0.1:8081")) == .originNotAllowed)
        #expect(code(Self.request(host: "h:80", origin: "http://h")) == nil)  // default port
        #expect(code(Self.request(origin: "https://app.example")) == nil)
        #expect(code(Self.request(origin: "null")) == .originNotAllowed)
        #expect(code(Self.request(origin: "https://evil.example")) == .originNotAllowed)
        // Only upgrades and state-changing methods are checked.
        #expect(code(Self.request(origin: "https://evil.example"), upgrade: false) == nil)
        #expect(code(Self.request("POST", origin: "https://evil.example"), upgrade: false) == .originNotAllowed)
        #expect(code(Self.request("DELETE", origin: "https://evil.example"), upgrade: false) == .originNotAllowed)
    }

    @Test func openHubsAnswerOnlyToHostsTheyCanVouchFor() {
        let loopback = BrowserGuard(hostRule: .loopback, allowedHosts: ["Tally.LAN"])
        let open = BrowserGuard(hostRule: .addresses)
        let users = BrowserGuard(hostRule: .any)
        for host in ["127.0.0.1:8080", "127.9.9.9", "localhost:8080", "LOCALHOST", "app.localhost:1",
                     "[::1]:8080", "tally.lan:8080"] {
            #expect(loopback.check(Self.request(host: host), isTLS: false, upgrade: true) == nil, "\(host)")
        }
        for host in ["evil.example:8080", "10.0.0.5:8080", "127.0.0.1.evil.example", "[fe80::1]", "localhost.evil"] {
            #expect(loopback.check(Self.request(host: host), isTLS: false, upgrade: true)?.code == .hostNotAllowed, "\(host)")
        }
        #expect(open.check(Self.request(host: "10.0.0.5:8080"), isTLS: false, upgrade: false) == nil)
        #expect(open.check(Self.request(host: "[fe80::1]:8080"), isTLS: false, upgrade: false) == nil)
        #expect(open.check(Self.request(host: "evil.example"), isTLS: false, upgrade: false)?.code == .hostNotAllowed)
        #expect(users.check(Self.request(host: "evil.example"), isTLS: false, upgrade: false) == nil)
        // The rebound page is same-origin with itself: only the Host check stops it.
        let rebound = Self.request(host: "evil.example:8080", origin: "http://evil.example:8080")
        #expect(loopback.check(rebound, isTLS: false, upgrade: true)?.code == .hostNotAllowed)
        #expect(users.check(rebound, isTLS: false, upgrade: true) == nil)
    }

    @Test func writesDeclareJSON() {
        func code(_ type: String?, method: String = "POST") -> ErrorCode? {
            BrowserGuard.checkJSONBody(Self.request(method, contentType: type), hasBody: true)?.code
        }
        #expect(code("application/json") == nil)
        #expect(code("Application/JSON; charset=utf-8") == nil)
        #expect(code("application/merge-patch+json") == nil)
        #expect(code("text/plain") == .unsupportedMediaType)
        #expect(code("application/x-www-form-urlencoded") == .unsupportedMediaType)
        #expect(code(nil) == .unsupportedMediaType)
        #expect(code(nil, method: "GET") == nil)
        #expect(BrowserGuard.checkJSONBody(Self.request("POST"), hasBody: false) == nil)
    }

    @Test func originAndHostSettingsAreChecked() {
        #expect(BrowserGuard.normalizedOrigin("https://app.example:8443") == "https://app.example:8443")
        #expect(BrowserGuard.normalizedOrigin("https://app.example/path") == nil)
        #expect(BrowserGuard.normalizedOrigin("ftp://app.example") == nil)
        #expect(BrowserGuard.normalizedOrigin("app.example") == nil)
        #expect(BrowserGuard.isHostName("tally.local"))
        #expect(BrowserGuard.isHostName("10.0.0.5"))
        #expect(!BrowserGuard.isHostName("http://tally.local"))
        #expect(!BrowserGuard.isHostName("tally.local:8080"))
    }
}
