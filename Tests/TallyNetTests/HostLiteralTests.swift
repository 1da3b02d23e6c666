import Testing
import TallyNet

/// One judgement of host text for the CLI, `tally serve` and the hub's `Host`
/// check. The three copies it replaced disagreed on spellings such as
/// `0:0::1` and `127.1`.
@Suite struct HostLiteralTests {
    @Test(arguments: [
        ("127.0.0.1", true), ("127.255.0.9", true), ("::1", true), ("0:0:0:0:0:0:0:1", true),
        ("0:0::1", true), ("localhost", true), ("LOCALHOST", true),
        ("128.0.0.1", false), ("::2", false), ("::", false), ("10.0.0.1", false),
        ("127.attacker.example", false), ("127.1", false), ("localhost.example", false), ("", false),
    ])
    func loopback(host: String, expected: Bool) {
        #expect(HostLiteral.isLoopback(host) == expected)
    }

    @Test func localhostIsANameNotAnAddress() {
        #expect(!HostLiteral.isLoopbackAddress("localhost"))
        #expect(!HostLiteral.isAddress("localhost"))
    }

    @Test(arguments: [
        ("192.0.2.7", true), ("2001:db8::7", true), ("::ffff:192.0.2.7", true),
        ("1.2.3", false), ("256.1.1.1", false), ("01.2.3.4", false), ("cafe", false),
        ("db8::g", false), ("example.com", false),
    ])
    func address(host: String, expected: Bool) {
        #expect(HostLiteral.isAddress(host) == expected)
    }
}
