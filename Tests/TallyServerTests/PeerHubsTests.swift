import Testing
import TallyHTTP
import TallyProtocol
@testable import TallyServer

/// A hub's peers (`--peers`, config `peers`): checked and normalized, listed
/// by `GET /v1/hubs`, let into the board's Content-Security-Policy, and
/// their pages' origins let in here.
@Suite struct PeerHubsTests {
    @Test func peersAreNormalizedOnceEach() throws {
        let peers = try PeerHubs(["ws://10.0.0.2:8080", "http://10.0.0.3:9090/", "wss://hub.example",
                                  "ws://10.0.0.2:8080/v1/ws", "https://[fd00::4]:8443"])
        #expect(peers.urls == ["ws://10.0.0.2:8080/v1/ws", "ws://10.0.0.3:9090/v1/ws", "wss://hub.example/v1/ws",
                               "wss://[fd00::4]:8443/v1/ws"])
        #expect(peers.origins == ["http://10.0.0.2:8080", "http://10.0.0.3:9090", "https://hub.example",
                                  "https://[fd00::4]:8443"])
        #expect(peers.connectSources == ["ws://10.0.0.2:8080", "ws://10.0.0.3:9090", "wss://hub.example",
                                         "wss://[fd00::4]:8443"])
        #expect(peers.json.serializedString
                == #"{"hubs":["ws://10.0.0.2:8080/v1/ws","ws://10.0.0.3:9090/v1/ws","wss://hub.example/v1/ws","wss://[fd00::4]:8443/v1/ws"]}"#)
        #expect(PeerHubs().json.serializedString == #"{"hubs":[]}"#)
    }

    @Test(arguments: [(["ws://a:1", "a:2"], 1), (["", "ws://a:1"], 0), (["ws://a:1", "ws://b:1", "ftp://c"], 2),
                      (["ws://a:70000"], 0)])
    func aPeerThatIsNotAHubsURLIsNamed(given: [String], index: Int) {
        #expect(throws: PeerHubs.Invalid.self) { try PeerHubs(given) }
        do { _ = try PeerHubs(given) } catch {
            #expect(error.index == index && error.text == given[index])
            #expect(error.message.contains("ws://10.0.0.2:8080"))
        }
    }

    @Test func theConfigFileTakesPeersAndNamesABadOne() throws {
        let file = try HubConfigFile.parse(try JSONValue.parse(#"{"peers":["ws://10.0.0.2:8080","http://10.0.0.3:8080"]}"#))
        #expect(file.peers?.urls == ["ws://10.0.0.2:8080/v1/ws", "ws://10.0.0.3:8080/v1/ws"])
        for (text, path) in [(#"{"peers":"ws://a:1"}"#, "$.peers: must be an array of strings"),
                             (#"{"peers":["ws://a:1","nope"]}"#, "$.peers[1]: must be a hub's URL"),
                             (#"{"peers":["ws://a:1",""]}"#, "$.peers[1]: must be a non-empty string"),
                             (#"{"peers":[7]}"#, "$.peers[0]: must be a non-empty string")] {
            let value = try JSONValue.parse(text)
            do {
                _ = try HubConfigFile.parse(value)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.description.hasPrefix(path), "\(error)")
            }
        }
    }

    @Test func theFlagWinsOverTheFileAndPeersPagesMayConnect() throws {
        let file = try HubConfigFile.parse(try JSONValue.parse(#"{"peers":["ws://10.0.0.2:8080"]}"#))
        #expect(HubConfiguration(file: file, overrides: HubOverrides()).peers.urls == ["ws://10.0.0.2:8080/v1/ws"])
        var flags = HubOverrides()
        flags.peers = try PeerHubs(["ws://127.0.0.1:9001"])
        let configuration = HubConfiguration(file: file, overrides: flags)
        #expect(configuration.peers.urls == ["ws://127.0.0.1:9001/v1/ws"])

        // A board loaded from the peer may open its WebSocket here.
        var headers = HTTPHeaders()
        headers.add("Host", "127.0.0.1:9000")
        headers.add("Origin", "http://127.0.0.1:9001")
        let upgrade = HTTPRequest(method: "GET", target: "/v1/ws", path: "/v1/ws", query: nil, version: .http1_1,
                                  headers: headers, body: [], keepAlive: true)
        #expect(configuration.browserGuard.check(upgrade, isTLS: false, upgrade: true) == nil)
        #expect(HubConfiguration().browserGuard.check(upgrade, isTLS: false, upgrade: true)?.code == .originNotAllowed)
    }

    @Test func theHubListsItsPeersAndItsPageMayConnectToThem() throws {
        let peers = try PeerHubs(["ws://127.0.0.1:9001", "wss://hub-2.example"])
        // The checkout's dashboard (Tests/TallyServerTests/ → Clients/).
        let clients = String(#filePath.split(separator: "/", omittingEmptySubsequences: false).dropLast(3)
            .joined(separator: "/")) + "/Clients"
        try withHub({ configuration in
            configuration.peers = peers
            configuration.webDirectory = clients
        }) { hub in
            let listed = try hub.http("GET", "/v1/hubs")
            #expect(listed.status == 200 && listed.header("Content-Type")?.hasPrefix("application/json") == true)
            #expect(try listed.json == ["hubs": ["ws://127.0.0.1:9001/v1/ws", "wss://hub-2.example/v1/ws"]])
            let page = try hub.http("GET", "/")
            #expect(page.status == 200)
            let policy = page.header("Content-Security-Policy") ?? ""
            #expect(policy.contains("connect-src 'self' ws://127.0.0.1:9001 wss://hub-2.example;"), "\(policy)")
        }
        try withHub({ $0.webDirectory = clients }) { hub in
            let listed = try hub.http("GET", "/v1/hubs")
            #expect(try listed.json == ["hubs": []])
            let policy = try hub.http("GET", "/").header("Content-Security-Policy") ?? ""
            #expect(policy.contains("connect-src 'self';"), "\(policy)")
        }
    }
}
