import Testing
import TallyNet
import TallyProtocol
import TallyServer
import TallyStore

/// `tally serve`'s settings: the embedded defaults, then the config file,
/// then the flags (`HubConfiguration.init(file:overrides:)`).
@Suite("HubOverrides")
struct HubOverridesTests {
    static func file(_ text: String) throws -> HubConfigFile {
        try HubConfigFile.parse(try JSONValue.parse(text))
    }

    static let someFile = """
        {"host":"0.0.0.0","port":9000,"threads":3,"data":"/srv/tally","durability":"normal",
         "retention":{"changes":500,"bytes":4096,"ageSeconds":60.5},"maxRecordSize":2048,"maxMessageSize":8192,
         "maxBlobSize":1024,"blobQuota":1073741824,"cacheSize":67108864,"echo":false,
         "allowOrigins":["https://a.example"],"allowHosts":["a.local"],"maxSubscriptions":7,"maxUnauthenticated":9,
         "lowStock":3,"indexes":[{"prefix":"items/","path":"location"}]}
        """

    @Test func withNeitherTheDefaultsHold() {
        var flags = HubOverrides()
        flags.webDirectory = "/web"
        let configuration = HubConfiguration(file: nil, overrides: flags)
        let defaults = HubConfiguration()
        #expect(configuration.server.host == defaults.server.host && configuration.server.port == defaults.server.port)
        #expect(configuration.dataDirectory == defaults.dataDirectory && configuration.durability == defaults.durability)
        #expect(configuration.retention.maxChanges == defaults.retention.maxChanges)
        #expect(configuration.blobQuotaBytes == defaults.blobQuotaBytes)
        #expect(configuration.echo == nil && configuration.servesEcho && !configuration.openNetwork)
        #expect(configuration.server.webSocket.deflate.enabled)
        #expect(configuration.core.authenticator == nil)
        #expect(configuration.webDirectory == "/web")
    }

    @Test func theFileSetsWhatItNames() throws {
        let configuration = HubConfiguration(file: try Self.file(Self.someFile), overrides: HubOverrides())
        #expect(configuration.server.host == "0.0.0.0" && configuration.server.port == 9000)
        #expect(configuration.server.threads == 3)
        #expect(configuration.dataDirectory == "/srv/tally" && configuration.durability == .normal)
        #expect(configuration.retention.maxChanges == 500 && configuration.retention.maxBytes == 4096)
        #expect(configuration.retention.maxAge == 60.5)
        #expect(configuration.core.limits.maxRecordBytes == 2048)
        #expect(configuration.server.webSocket.maxMessageSize == 8192)
        #expect(configuration.maxBlobBytes == 1024 && configuration.blobQuotaBytes == 1 << 30)
        #expect(configuration.core.cacheBytes == 64 << 20)
        #expect(configuration.echo == false && !configuration.servesEcho)
        #expect(configuration.allowedOrigins == ["https://a.example"] && configuration.allowedHosts == ["a.local"])
        #expect(configuration.core.maxSubscriptionsPerConnection == 7)
        #expect(configuration.core.maxUnauthenticatedConnections == 9)
        #expect(configuration.core.lowStock == 3 && HubConfiguration().core.lowStock == 5)
        #expect(configuration.core.indexes.map(\.prefix) == ["items/"])
    }

    @Test func flagsWinOverTheFile() throws {
        var flags = HubOverrides()
        flags.host = "127.0.0.1"
        flags.port = 0
        flags.threads = 1
        flags.dataDirectory = ":memory:"
        flags.durability = .off
        flags.retainChanges = 10
        flags.retainBytes = 2048
        flags.retainAgeSeconds = 5
        flags.maxRecordBytes = 512
        flags.blobQuotaBytes = 4096
        flags.cacheBytes = 2 << 20
        flags.maxMessageBytes = 1 << 20
        flags.maxOutboundBytes = 3 << 20
        flags.pingIntervalMillis = 1000
        flags.idleTimeoutMillis = 2000
        flags.compression = false
        flags.echo = true
        flags.allowedOrigins = ["https://b.example"]
        flags.allowedHosts = ["b.local"]
        flags.maxSubscriptions = 70
        flags.maxUnauthenticated = 90
        flags.openNetwork = true
        flags.webDirectory = "/web"
        flags.logLevel = .error
        let configuration = HubConfiguration(file: try Self.file(Self.someFile), overrides: flags)
        #expect(configuration.server.host == "127.0.0.1" && configuration.server.port == 0)
        #expect(configuration.server.threads == 1)
        #expect(configuration.dataDirectory == ":memory:" && configuration.durability == .off)
        #expect(configuration.retention.maxChanges == 10 && configuration.retention.maxBytes == 2048)
        #expect(configuration.retention.maxAge == 5)
        #expect(configuration.core.limits.maxRecordBytes == 512 && configuration.blobQuotaBytes == 4096)
        #expect(configuration.core.cacheBytes == 2 << 20)
        #expect(configuration.server.webSocket.maxMessageSize == 1 << 20)
        #expect(configuration.server.webSocket.maxOutboundBytes == 3 << 20)
        #expect(configuration.server.webSocket.pingIntervalMillis == 1000)
        #expect(configuration.server.webSocket.idleTimeoutMillis == 2000)
        #expect(!configuration.server.webSocket.deflate.enabled)
        #expect(configuration.echo == true)
        // Repeatable flags add to the file's lists.
        #expect(configuration.allowedOrigins == ["https://a.example", "https://b.example"])
        #expect(configuration.allowedHosts == ["a.local", "b.local"])
        #expect(configuration.core.maxSubscriptionsPerConnection == 70)
        #expect(configuration.core.maxUnauthenticatedConnections == 90)
        #expect(configuration.openNetwork && configuration.webDirectory == "/web")
        #expect(configuration.server.logger.level == .error)
        // What no flag sets stays as the file has it.
        #expect(configuration.maxBlobBytes == 1024 && configuration.core.indexes.count == 1)
    }

    @Test func usersTurnAuthenticationOn() throws {
        let token = String(repeating: "ab", count: 32)
        let file = try Self.file(#"{"users":[{"name":"ana","role":"staff","tokenSha256":"\#(token)"}]}"#)
        let configuration = HubConfiguration(file: file, overrides: HubOverrides())
        #expect(configuration.core.authenticator?.users.count == 1)
        #expect(!configuration.servesEcho)
        let none = HubConfiguration(file: try Self.file(#"{"users":[]}"#), overrides: HubOverrides())
        #expect(none.core.authenticator == nil)
    }

    @Test func openModeOffLoopbackNeedsOpenOrUsers() throws {
        var flags = HubOverrides()
        #expect(!HubConfiguration(file: nil, overrides: flags).exposesOpenMode)
        flags.host = "localhost"
        #expect(!HubConfiguration(file: nil, overrides: flags).exposesOpenMode)
        flags.host = "0.0.0.0"
        #expect(HubConfiguration(file: nil, overrides: flags).exposesOpenMode)
        flags.openNetwork = true
        #expect(!HubConfiguration(file: nil, overrides: flags).exposesOpenMode)
        let token = String(repeating: "cd", count: 32)
        let users = try Self.file(#"{"host":"10.0.0.5","users":[{"name":"a","role":"admin","tokenSha256":"\#(token)"}]}"#)
        #expect(!HubConfiguration(file: users, overrides: HubOverrides()).exposesOpenMode)
    }

    @Test func theAddressBracketsIPv6() {
        var flags = HubOverrides()
        #expect(HubConfiguration(file: nil, overrides: flags).address(port: 8080) == "http://127.0.0.1:8080")
        flags.host = "::1"
        #expect(HubConfiguration(file: nil, overrides: flags).address(port: 9) == "http://[::1]:9")
    }
}
