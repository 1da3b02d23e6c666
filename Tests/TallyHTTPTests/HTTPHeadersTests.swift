import Testing
import TallyHTTP

@Suite("HTTPHeaders")
struct HTTPHeadersTests {
    let headers = HTTPHeaders([
        ("Host", "hub"), ("Accept", "text/html"), ("accept", "application/json"), ("Connection", "keep-alive , Upgrade"),
    ])

    @Test func lookupIgnoresCaseAndReturnsTheFirstValue() {
        #expect(headers["HOST"] == "hub")
        #expect(headers["Accept"] == "text/html")
        #expect(headers["X-Missing"] == nil)
        #expect(headers.contains("ACCEPT"))
    }

    @Test func valuesKeepOrderAndDoNotSplitLists() {
        #expect(headers.values("ACCEPT") == ["text/html", "application/json"])
        #expect(headers.values("connection") == ["keep-alive , Upgrade"])
        #expect(headers.values("nope").isEmpty)
    }

    @Test func setReplacesEveryFieldOfTheNameInPlace() {
        var copy = headers
        copy.set("ACCEPT", "*/*")
        #expect(copy.fields.map(\.name) == ["Host", "ACCEPT", "Connection"])
        #expect(copy.values("accept") == ["*/*"])
        copy.set("X-New", "1")
        #expect(copy.fields.last?.name == "X-New")
    }

    @Test func removeDropsEveryFieldOfTheName() {
        var copy = headers
        copy.remove("accept")
        #expect(copy.fields.map(\.name) == ["Host", "Connection"])
    }

    @Test func containsTokenSplitsTrimsAndIgnoresCase() {
        #expect(headers.containsToken("connection", "UPGRADE"))
        #expect(headers.containsToken("Connection", "keep-alive"))
        #expect(!headers.containsToken("Connection", "alive"))
        #expect(!headers.containsToken("Connection", "close"))
        let split = HTTPHeaders([("Connection", "keep-alive"), ("Connection", ",, close ,")])
        #expect(split.containsToken("Connection", "close"))
    }

    @Test func equalityIgnoresNameCaseButNotOrderOrValues() {
        #expect(HTTPHeaders([("Host", "a"), ("X", "1")]) == HTTPHeaders([("host", "a"), ("x", "1")]))
        #expect(HTTPHeaders([("Host", "a"), ("X", "1")]) != HTTPHeaders([("X", "1"), ("Host", "a")]))
        #expect(HTTPHeaders([("Host", "a")]) != HTTPHeaders([("Host", "A")]))
        #expect(HTTPHeaders([("Host", "a")]) != HTTPHeaders([("Host", "a"), ("Host", "a")]))
    }
}
