import Testing
@testable import TallyProtocol

// Names.validate / validatePrefix against PROTOCOL.md "Names, paths, limits":
// 1–512 UTF-8 bytes, no control characters, no leading or trailing `/`, no
// `//`; a prefix may be empty and may end with `/`.

private func nameError(_ name: String, field: String = "name") -> ProtocolError? {
    do {
        try Names.validate(name, field: field)
        return nil
    } catch {
        return error
    }
}

private func prefixError(_ prefix: String, field: String = "prefix") -> ProtocolError? {
    do {
        try Names.validatePrefix(prefix, field: field)
        return nil
    } catch {
        return error
    }
}

@Suite("Names: record, list, topic names and prefixes")
struct NamesTests {
    @Test(arguments: ["a", "orders/42", "intake/7f3c", "items/sku-123", "a/b/c", "with space", "é", "名前/🙂",
                      "a.b[0]", "tab-less", "-", "~", "a/b-"])
    func validNames(_ name: String) {
        #expect(nameError(name) == nil)
        #expect(prefixError(name) == nil)
    }

    @Test func lengthIsCountedInBytes() {
        #expect(Names.maxBytes == 512)
        #expect(nameError(String(repeating: "a", count: 1)) == nil)
        #expect(nameError(String(repeating: "a", count: 512)) == nil)
        let long = nameError(String(repeating: "a", count: 513))
        #expect(long?.code == .badName)
        #expect(long?.details["field"] == "name")
        // 256 two-byte scalars are 512 bytes; one more byte is over.
        #expect(nameError(String(repeating: "é", count: 256)) == nil)
        #expect(nameError(String(repeating: "é", count: 256) + "a")?.code == .badName)
        // 128 four-byte scalars fit; 129 (516 bytes, 129 characters) do not.
        #expect(nameError(String(repeating: "🙂", count: 128)) == nil)
        #expect(nameError(String(repeating: "🙂", count: 129))?.code == .badName)
        // A decomposed "é" is 3 bytes: 171 of them (513 bytes, 171 characters) are too many.
        #expect(nameError(String(repeating: "e\u{301}", count: 170)) == nil)
        #expect(nameError(String(repeating: "e\u{301}", count: 171))?.code == .badName)
        // Prefixes have the same upper bound.
        #expect(prefixError(String(repeating: "a", count: 512)) == nil)
        #expect(prefixError(String(repeating: "a", count: 513))?.code == .badName)
        #expect(prefixError(String(repeating: "é", count: 256) + "/")?.code == .badName)
    }

    @Test func emptyIsRefusedForNamesOnly() {
        let error = nameError("", field: "topic")
        #expect(error?.code == .badName)
        #expect(error?.details["field"] == "topic")
        #expect(prefixError("") == nil)
    }

    @Test func slashes() {
        for name in ["/", "/a", "a/", "a//b", "//", "a/b//", "///a"] {
            #expect(nameError(name)?.code == .badName, "\(name)")
        }
        // A prefix may end with one slash, but not start with one or hold two.
        #expect(prefixError("orders/") == nil)
        #expect(prefixError("a/b/") == nil)
        for prefix in ["/", "/a", "a//", "a//b", "//"] {
            #expect(prefixError(prefix)?.code == .badName, "\(prefix)")
        }
    }

    @Test func controlCharacters() {
        let controls: [Unicode.Scalar] = [Unicode.Scalar(0x00), Unicode.Scalar(0x01), "\t", "\n", "\r",
                                          Unicode.Scalar(0x1B), Unicode.Scalar(0x1F), Unicode.Scalar(0x7F)]
        for control in controls {
            let name = "a" + String(Character(control)) + "b"
            #expect(nameError(name)?.code == .badName, "U+\(String(control.value, radix: 16))")
            #expect(prefixError(name)?.code == .badName, "U+\(String(control.value, radix: 16))")
            #expect(nameError(String(Character(control)))?.code == .badName)
        }
        // Only C0 and DEL are control characters here: space, U+0080…U+009F
        // (two-byte sequences) and other scalars are allowed.
        #expect(nameError("a b") == nil)
        #expect(nameError("a\u{85}b") == nil)
        #expect(nameError("a\u{200B}b") == nil)
    }

    @Test func errorNamesTheFieldGivenAndExplains() {
        let error = nameError("a//b", field: "entries[3]")
        #expect(error?.code == .badName)
        #expect(error?.details["field"] == "entries[3]")
        #expect(error?.message.hasPrefix("entries[3] ") == true)
        #expect(error?.details.count == 1)
    }
}
