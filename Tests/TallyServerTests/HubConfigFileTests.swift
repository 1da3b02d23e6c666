import Testing
import TallyProtocol
@testable import TallyServer
import TallyStore

/// `tally serve --config FILE`: every setting read, every mistake named by
/// its JSON path, nothing silently defaulted.
@Suite("HubConfigFile")
struct HubConfigFileTests {
    static func parse(_ text: String) throws -> HubConfigFile {
        try HubConfigFile.parse(try JSONValue.parse(text))
    }

    static func refusal(_ text: String) -> String? {
        do {
            _ = try parse(text)
            return nil
        } catch let error as HubConfigFile.Invalid {
            return error.description
        } catch {
            return "\(error)"
        }
    }

    @Test func readsEverySetting() throws {
        let file = try Self.parse("""
            {"host":"0.0.0.0","port":9000,"threads":3,"data":"/srv/tally","durability":"normal",
             "retention":{"changes":500,"bytes":268435456,"ageSeconds":60.5},"maxRecordSize":2048,"maxMessageSize":4096,
             "blobQuota":1073741824,"cacheSize":67108864}
            """)
        #expect(file.host == "0.0.0.0")
        #expect(file.port == 9000)
        #expect(file.threads == 3)
        #expect(file.data == "/srv/tally")
        #expect(file.durability == .normal)
        #expect(file.retainChanges == 500)
        #expect(file.retainBytes == 256 << 20)
        #expect(file.retainAgeSeconds == 60.5)
        #expect(file.maxRecordSize == 2048)
        #expect(file.maxMessageSize == 4096)
        #expect(file.blobQuota == 1 << 30)
        #expect(file.cacheSize == 64 << 20)
        let empty = try Self.parse("{}")
        #expect(empty.port == nil && empty.data == nil)
    }

    @Test(arguments: [
        ("[]", "$: must be a JSON object"),
        (#"{"prot":1}"#, "$.prot: unknown setting"),
        (#"{"lowStock":-1}"#, "$.lowStock: must be an integer from 0 to 2147483647"),
        (#"{"port":"80"}"#, "$.port: must be an integer"),
        (#"{"port":70000}"#, "$.port: must be an integer from 0 to 65535"),
        (#"{"durability":"fast"}"#, "$.durability: must be \"full\", \"normal\" or \"off\""),
        (#"{"retention":{"changes":"x"}}"#, "$.retention.changes: must be an integer"),
        (#"{"retention":{"days":1}}"#, "$.retention.days: unknown setting"),
        (#"{"retention":{"bytes":0}}"#, "$.retention.bytes: must be an integer from 1 to 1099511627776"),
        (#"{"retention":{"ageSeconds":0}}"#, "$.retention.ageSeconds: must be a number of seconds"),
        (#"{"data":""}"#, "$.data: must be a non-empty string"),
        (#"{"blobQuota":-1}"#, "$.blobQuota: must be an integer from 1 to 1099511627776"),
        (#"{"cacheSize":4096}"#, "$.cacheSize: must be an integer from 1048576 to 1099511627776"),
    ])
    func mistakesNameTheirPath(text: String, expected: String) {
        let message = Self.refusal(text)
        #expect(message?.hasPrefix(expected) == true, "\(String(describing: message))")
    }

    @Test func anUnreadableFileSaysSo() {
        #expect(throws: HubConfigFile.Invalid.self) { try HubConfigFile.load(path: "/nonexistent/tally.json") }
    }
}
