import Testing
@testable import TallyWebSocket

/// Handshake keys (RFC 6455 §1.3, §4) and the base64 beneath them.
@Suite struct WebSocketHandshakeTests {
    @Test func acceptValueFromRFC6455() {
        #expect(WebSocketHandshake.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func validKeys() {
        #expect(WebSocketHandshake.isValidKey("dGhlIHNhbXBsZSBub25jZQ=="))
        #expect(WebSocketHandshake.isValidKey("AAAAAAAAAAAAAAAAAAAAAA=="))
    }

    @Test(arguments: ["", "dGhlIHNhbXBsZSBub25jZQ=", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZQ===",
                      "dGhlIHNhbXBsZSBub25jZSE=", "dGhlIHNhbXBsZSBub25jZXMh", "dGhlIHNhbXBsZSBub25j!Q==",
                      "dGhl IHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25j=Q==", "AAAAAAAAAAAAAAAAAAAA"])
    func invalidKeys(key: String) {
        #expect(!WebSocketHandshake.isValidKey(key))
    }

    @Test func madeKeysAreValidAndFresh() {
        let keys = (0..<20).map { _ in WebSocketHandshake.makeKey() }
        #expect(keys.allSatisfy(WebSocketHandshake.isValidKey))
        #expect(Set(keys).count == keys.count)
    }

    @Test(arguments: [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="),
                      ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")])
    func base64VectorsFromRFC4648(plain: String, encoded: String) {
        #expect(Base64.encode(bytes(plain)) == encoded)
        #expect(Base64.decode(encoded) == bytes(plain))
    }

    @Test func closeCodeWireValidity() {
        let valid = (0...5999).filter { WebSocketCloseCode(rawValue: UInt16($0)).isValidOnWire }
        #expect(valid == Array(1000...1003) + Array(1007...1014) + Array(3000...4999))
    }
}
