import Testing
@testable import TallyWebSocket

/// Framing, masking, close frames, and encoder → decoder round trips.
@Suite struct WebSocketEncoderTests {
    @Test func serverTextFrameIsTheRFCExample() {
        var encoder = WebSocketEncoder(role: .server)
        #expect(encoder.message(.text, bytes("Hello")) == hex("81 05 48 65 6c 6c 6f"))
    }

    @Test(arguments: [(0, [UInt8(0x00)]), (125, [0x7D]), (126, [0x7E, 0x00, 0x7E]), (65_535, [0x7E, 0xFF, 0xFF]),
                      (65_536, [0x7F, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00])])
    func minimalLengthEncoding(size: Int, lengthBytes: [UInt8]) {
        var encoder = WebSocketEncoder(role: .server)
        let wire = encoder.message(.binary, [UInt8](repeating: 7, count: size))
        #expect(wire[0] == 0x82)
        #expect(Array(wire[1...lengthBytes.count]) == lengthBytes)
        #expect(wire.count == 1 + lengthBytes.count + size)
    }

    @Test func clientFramesAreMaskedWithFreshKeys() {
        var encoder = WebSocketEncoder(role: .client)
        let payload = bytes("Hello")
        let first = encoder.message(.text, payload)
        let second = encoder.message(.text, payload)
        #expect(first[1] == 0x85)
        #expect(first.count == 2 + 4 + 5)
        #expect(first[2..<6] != second[2..<6], "a new key per frame")
        #expect(decodeEveryWay(first, role: .server).events == [.message(.text, payload)])
        #expect(decodeEveryWay(second, role: .server).events == [.message(.text, payload)])
    }

    @Test func fragmentedMessage() {
        var encoder = WebSocketEncoder(role: .server)
        let wire = bytes("0123456789").withUnsafeBytes { encoder.fragmentedMessage(.text, $0, fragmentSize: 3) }
        #expect(wire == frame(0x1, bytes("012"), fin: false) + frame(0x0, bytes("345"), fin: false)
                + frame(0x0, bytes("678"), fin: false) + frame(0x0, bytes("9")))
        #expect(decodeEveryWay(wire).events == [.message(.text, bytes("0123456789"))])
    }

    @Test func fragmentedMessageEdgeCases() {
        var encoder = WebSocketEncoder(role: .client, deflate: PerMessageDeflateParameters(minimumSize: 0))
        let empty = [UInt8]().withUnsafeBytes { encoder.fragmentedMessage(.binary, $0, fragmentSize: 4) }
        #expect(empty.count == 6 && empty[0] == 0x82, "one empty frame, never compressed")
        let oneByteFrames = bytes("abc").withUnsafeBytes { encoder.fragmentedMessage(.binary, $0, fragmentSize: 0) }
        #expect(oneByteFrames.count == 3 * 7)
        #expect(decodeEveryWay(oneByteFrames, role: .server).events == [.message(.binary, bytes("abc"))])
    }

    @Test func pingAndPong() {
        var encoder = WebSocketEncoder(role: .server)
        #expect(bytes("Hello").withUnsafeBytes { encoder.ping($0) } == hex("89 05 48 65 6c 6c 6f"))
        #expect(bytes("Hello").withUnsafeBytes { encoder.pong($0) } == hex("8a 05 48 65 6c 6c 6f"))
        let long = [UInt8](repeating: 1, count: 200).withUnsafeBytes { encoder.ping($0) }
        #expect(long.count == 2 + 125, "control payloads are capped at 125 bytes")
    }

    @Test func closeWithCodeAndReason() {
        var encoder = WebSocketEncoder(role: .server)
        #expect(encoder.close(.goingAway, reason: "bye") == hex("88 05 03 e9 62 79 65"))
        #expect(encoder.close(.noStatus, reason: "ignored") == hex("88 00"))
    }

    @Test func closeReasonIsTruncatedAtACodePoint() {
        var encoder = WebSocketEncoder(role: .client)
        let reason = String(repeating: "é", count: 100)  // 200 bytes
        let wire = encoder.close(.normal, reason: reason)
        let result = decodeEveryWay(wire, role: .server)
        guard case .close(let code, let decoded)? = result.events.first else {
            Issue.record("no close event: \(result)")
            return
        }
        #expect(code == .normal)
        #expect(decoded == String(repeating: "é", count: 61), "122 bytes: 123 would split a code point")
        #expect(wire[1] & 0x7F == 2 + 122)

        let ascii = encoder.close(.normal, reason: String(repeating: "x", count: 500))
        #expect(ascii[1] & 0x7F == 125)
    }

    @Test func shareableFrames() {
        #expect(WebSocketEncoder(role: .server).producesShareableFrames)
        #expect(!WebSocketEncoder(role: .server, deflate: PerMessageDeflateParameters()).producesShareableFrames)
        #expect(WebSocketEncoder(role: .server, deflate: PerMessageDeflateParameters(serverNoContextTakeover: true))
                    .producesShareableFrames)
        #expect(!WebSocketEncoder(role: .server, deflate: PerMessageDeflateParameters(clientNoContextTakeover: true))
                    .producesShareableFrames)
        #expect(WebSocketEncoder(role: .client, deflate: PerMessageDeflateParameters(clientNoContextTakeover: true))
                    .producesShareableFrames)
    }

    @Test func shareableFramesAreIdenticalAcrossEncoders() {
        let parameters = PerMessageDeflateParameters(serverNoContextTakeover: true, minimumSize: 0)
        var a = WebSocketEncoder(role: .server, deflate: parameters)
        var b = WebSocketEncoder(role: .server, deflate: parameters)
        let payload = compressibleBytes(count: 5000, seed: 5)
        _ = a.message(.text, compressibleBytes(count: 5000, seed: 6))  // history must not matter
        #expect(a.message(.text, payload) == b.message(.text, payload))
    }

    @Test(arguments: [WebSocketRole.server, .client])
    func roundTripEveryKindOfFrame(role: WebSocketRole) {
        var encoder = WebSocketEncoder(role: role)
        var wire: [UInt8] = []
        wire += encoder.message(.text, bytes("héllo"))
        wire += encoder.message(.binary, pseudoRandomBytes(count: 70_000, seed: 8))
        wire += bytes("frag").withUnsafeBytes { encoder.fragmentedMessage(.binary, $0, fragmentSize: 1) }
        wire += [UInt8]([1]).withUnsafeBytes { encoder.ping($0) }
        wire += [UInt8]([2]).withUnsafeBytes { encoder.pong($0) }
        wire += encoder.close(.policyViolation, reason: "done")
        let result = decodeEveryWay(wire, role: role.peer)
        #expect(result == DecodeResult(events: [
            .message(.text, bytes("héllo")),
            .message(.binary, pseudoRandomBytes(count: 70_000, seed: 8)),
            .message(.binary, bytes("frag")),
            .ping([1]), .pong([2]),
            .close(.policyViolation, reason: "done"),
        ]))
    }
}
