import Testing
@testable import TallyServer

/// `HubCore.lookupKey` works on UTF-8 bytes (the code index runs it for
/// every code of every item; the Character-based version cost most of the
/// 2.3 s a first resolve took with 100,000 items). It must give the keys
/// the Character-based version gave.
@Suite("Resolve: lookup keys")
struct ResolveKeyTests {
    /// The previous, Character-based implementation, kept as the reference.
    static func referenceKey(_ code: String) -> String {
        let drop = Set(" \t\r\n")
        func trimmed(_ text: String) -> String {
            String(text.drop { drop.contains($0) }.reversed().drop { drop.contains($0) }.reversed())
        }
        var text = Substring(trimmed(code))
        if let scheme = text.firstRange(of: "://") {
            var path = text[scheme.upperBound...]
            path = path.prefix { $0 != "?" && $0 != "#" }
            if let items = path.firstRange(of: "/items/") {
                text = path[items.upperBound...]
            } else {
                text = path.split(separator: "/").last ?? path
            }
            while text.hasSuffix("/") { text = text.dropLast() }
        }
        return text.lowercased()
    }

    static let codes = [
        "SKU-1", " sku-1 ", "\tA1B2\r\n", "550E8400-E29B-41D4-A716-446655440000",
        "https://shop.example/items/Drill-01?ref=qr", "https://shop.example/items/Drill-01/", "http://x/a/b/C#frag",
        "https://host/", "https://host", "https://", "://", "a://b//", "https://h/items/", "https://h/items/x/items/y",
        "", "   ", "Ünïcode-Ä", "ÉCLAIR://x/Y", "sn 42", "https://h/p?items/x", "https://h/a/items/b#c",
        "https://h///", "x:/y", "ABC://DEF/ghi/JKL/", "tab\there",
    ]

    @Test(arguments: codes)
    func keysAreAsBefore(_ code: String) {
        #expect(HubCore.lookupKey(code) == Self.referenceKey(code), "\(code.debugDescription)")
    }

    @Test func aTrailingLineFeedIsTrimmed() {
        // The Character-based trim knew "\r\n" as one Character and missed
        // a lone "\n"; a scanned code ending in a newline now matches.
        #expect(HubCore.lookupKey("SKU-1\n") == "sku-1")
        #expect(HubCore.identifier(for: " SKU 1\n") == "SKU-1")
    }
}
