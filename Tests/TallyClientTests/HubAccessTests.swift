import Testing
import TallyClient
import TallyProtocol

/// Lists of hubs (`--server a,b`, `$TALLY_SERVER`): parsing, the order they
/// are tried in, the clear-text token check on every one, and how a list is
/// remembered and compared.
@Suite struct HubAccessTests {
    @Test func aListParsesWithSpacesAroundItsElements() throws {
        #expect(try HubAccess.parseList("ws://a:8080") == ["ws://a:8080"])
        #expect(try HubAccess.parseList("ws://a:8080, http://b:9090 ,wss://c") == ["ws://a:8080", "http://b:9090", "wss://c"])
    }

    @Test(arguments: [
        ("ws://a:8080,,ws://b:8080", 2, ""),
        ("ws://a:8080,", 2, ""),
        ("", 1, ""),
        ("ws://a:8080,b:8080", 2, "b:8080"),
        ("ws://a:8080, ftp://c", 2, "ftp://c"),
        ("ws://a:99999", 1, "ws://a:99999"),
        ("ws://a:1,ws://b:2,ws://", 3, "ws://"),
    ])
    func aBadElementIsNamed(list: String, position: Int, element: String) {
        do {
            let parsed = try HubAccess.parseList(list)
            Issue.record("accepted \(parsed)")
        } catch {
            #expect(error.position == position && error.element == element, "\(error)")
            if element.isEmpty {
                #expect(error.description.contains("hub \(position) of '\(list)' is empty"), "\(error)")
            } else {
                #expect(error.description.contains("'\(element)'") && error.description.contains("is not a hub URL"),
                        "\(error)")
            }
        }
    }

    @Test func theHubsComeInTheirOrderAndGoRoundFromAnyOfThem() {
        let access = HubAccess(servers: ["ws://a:1", "http://b:2", "ws://c:3/custom"])
        #expect(access.urls == ["ws://a:1/v1/ws", "ws://b:2/v1/ws", "ws://c:3/custom"])
        #expect(access.url == "ws://a:1/v1/ws" && access.httpBase == "http://a:1")
        #expect(access.rotated(from: 1).hubs == ["http://b:2", "ws://c:3/custom", "ws://a:1"])
        #expect(access.rotated(from: 3).hubs == access.hubs)
        // Without servers, the defaults (the CLI's $TALLY_SERVER).
        let defaults = HubAccess(defaultURLs: ["ws://x:1", "ws://y:2"])
        #expect(defaults.urls == ["ws://x:1/v1/ws", "ws://y:2/v1/ws"])
        #expect(HubAccess(servers: [], defaultURLs: []).urls == ["ws://127.0.0.1:8080/v1/ws"])
        #expect(HubAccess(server: "ws://one:1").urls == ["ws://one:1/v1/ws"])
    }

    @Test func aListIsRememberedAndComparedHubByHub() {
        let given = HubAccess(servers: ["ws://a:1", "ws://b:2"])
        #expect(given.label == "ws://a:1,ws://b:2")
        #expect(given.jobHub == "http://a:1,http://b:2")
        // One hub: as the mirror and intake jobs recorded it before lists.
        #expect(HubAccess(server: nil, defaultURL: "ws://a:1").label == "ws://a:1/v1/ws")
        #expect(HubAccess(server: "http://a:1").jobHub == "http://a:1")
        #expect(HubAccess.shareAHub("ws://a:1,ws://b:2", "http://b:2"))
        #expect(HubAccess.shareAHub("ws://a:1/v1/ws", "ws://a:1"))
        #expect(HubAccess.shareAHub("http://a:1,http://b:2", "ws://c:3, ws://b:2/v1/ws"))
        #expect(!HubAccess.shareAHub("ws://a:1,ws://b:2", "ws://c:3"))
    }

    @Test func theClearTextTokenCheckCoversEveryHubOfTheList() {
        let list = ["ws://127.0.0.1:8080", "wss://hub-2.example", "http://hub-3.example:8080"]
        #expect(throws: HubError.insecureToken(url: "ws://hub-3.example:8080/v1/ws")) {
            try HubAccess(servers: list, token: "t").checkTransports()
        }
        #expect(throws: HubError.insecureToken(url: "ws://hub-3.example:8080/v1/ws")) {
            try BlockingTallyClient(access: HubAccess(servers: list, token: "t"))
        }
        #expect(throws: HubError.insecureToken(url: "http://hub-3.example:8080/healthz")) {
            try RESTClient(access: HubAccess(servers: list, token: "t")).get("/healthz")
        }
        // Without a token, or with --insecure, nothing to protect.
        #expect(throws: Never.self) { try HubAccess(servers: list).checkTransports() }
        #expect(throws: Never.self) { try HubAccess(servers: list, token: "t", insecure: true).checkTransports() }
        #expect(throws: Never.self) {
            try HubAccess(servers: ["ws://127.0.0.1:1", "wss://hub-2.example"], token: "t").checkTransports()
        }
    }

    @Test func everyHubTriedIsNamedWhenNoneAnswers() {
        let error = HubError.noneReachable([.unreachable(url: "ws://a:1/v1/ws", reason: "cannot connect: Connection refused"),
                                            .unreachable(url: "ws://b:2/v1/ws", reason: "no answer within 5000 ms")])
        #expect(error.description.hasPrefix("cannot reach any of the 2 hubs: ws://a:1/v1/ws: cannot connect: Connection refused; ws://b:2/v1/ws: no answer within 5000 ms."),
                "\(error)")
        #expect(ReplayFailure(error) == .keep)
    }
}
