import Testing
@testable import TallyWebSocket

/// permessage-deflate on the wire: RFC 7692 §7.2.3 examples, round trips,
/// limits and corrupt input.
@Suite struct PerMessageDeflateTests {
    let takeover = PerMessageDeflateParameters(minimumSize: 0)
    let noTakeover = PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true,
                                                 minimumSize: 0)

    // MARK: RFC 7692 §7.2.3 examples (server to client, unmasked)

    @Test func helloCompressed() {
        // §7.2.3.1: "Hello" as one compressed frame.
        let result = decodeEveryWay(hex("c1 07 f2 48 cd c9 c9 07 00"), deflate: takeover)
        #expect(result == DecodeResult(events: [.message(.text, bytes("Hello"))]))
    }

    @Test func helloCompressedAndFragmented() {
        // §7.2.3.1: the same payload split over two frames; RSV1 on the first only.
        let result = decodeEveryWay(hex("41 03 f2 48 cd 80 04 c9 c9 07 00"), deflate: takeover)
        #expect(result.events == [.message(.text, bytes("Hello"))])
    }

    @Test func helloTwiceWithContextTakeover() {
        // §7.2.3.2: the second "Hello" refers back into the first.
        let input = hex("c1 07 f2 48 cd c9 c9 07 00 c1 05 f2 00 11 00 00")
        #expect(decodeEveryWay(input, deflate: takeover).events
                == [.message(.text, bytes("Hello")), .message(.text, bytes("Hello"))])
    }

    @Test func encoderReproducesTheRFCBytes() {
        var encoder = WebSocketEncoder(role: .server, deflate: takeover)
        #expect(encoder.message(.text, bytes("Hello")) == hex("c1 07 f2 48 cd c9 c9 07 00"))
        #expect(encoder.message(.text, bytes("Hello")) == hex("c1 05 f2 00 11 00 00"))

        var fresh = WebSocketEncoder(role: .server, deflate: noTakeover)
        #expect(fresh.message(.text, bytes("Hello")) == hex("c1 07 f2 48 cd c9 c9 07 00"))
        #expect(fresh.message(.text, bytes("Hello")) == hex("c1 07 f2 48 cd c9 c9 07 00"))
    }

    @Test func storedBlock() {
        // §7.2.3.3: a DEFLATE block with no compression.
        let input = hex("c1 0b 00 05 00 fa ff 48 65 6c 6c 6f 00")
        #expect(decodeEveryWay(input, deflate: takeover).events == [.message(.text, bytes("Hello"))])
    }

    @Test func finalBlockThenContextTakeover() {
        // §7.2.3.4: "Hello" ending with a BFINAL block. The window must
        // survive it: the next message refers back to "Hello".
        let input = hex("c1 08 f3 48 cd c9 c9 07 00 00") + hex("c1 05 f2 00 11 00 00")
        #expect(decodeEveryWay(input, deflate: takeover).events
                == [.message(.text, bytes("Hello")), .message(.text, bytes("Hello"))])
    }

    @Test func twoDeflateBlocksInOneMessage() {
        // §7.2.3.5.
        let input = hex("c1 0d f2 48 05 00 00 00 ff ff ca c9 c9 07 00")
        #expect(decodeEveryWay(input, deflate: takeover).events == [.message(.text, bytes("Hello"))])
    }

    @Test func emptyMessage() {
        // §7.2.3.6: an empty message compresses to one 0x00 byte.
        #expect(decodeEveryWay(hex("c1 01 00"), deflate: takeover).events == [.message(.text, [])])
        var encoder = WebSocketEncoder(role: .server, deflate: noTakeover)
        #expect(encoder.message(.text, []) == hex("c1 01 00"))
        // With context takeover zlib has nothing to flush the second time;
        // the encoder must still send the 0x00 byte.
        var keeping = WebSocketEncoder(role: .server, deflate: takeover)
        #expect(keeping.message(.text, []) == hex("c1 01 00"))
        #expect(keeping.message(.text, []) == hex("c1 01 00"))
        #expect(decodeEveryWay(hex("c1 01 00 c1 01 00"), deflate: takeover).events
                == [.message(.text, []), .message(.text, [])])
    }

    @Test func maskedCompressedFrameFromClient() {
        let input = frame(0x1, hex("f2 48 cd c9 c9 07 00"), rsv: 0b100, mask: testMask)
        #expect(decodeEveryWay(input, role: .server, deflate: takeover).events == [.message(.text, bytes("Hello"))])
    }

    @Test func uncompressedMessagesMayBeMixedIn() {
        // RFC 7692 §6: RSV1 clear means the message is not compressed.
        let input = hex("c1 07 f2 48 cd c9 c9 07 00") + frame(0x2, [1, 2]) + hex("c1 05 f2 00 11 00 00")
        #expect(decodeEveryWay(input, deflate: takeover).events
                == [.message(.text, bytes("Hello")), .message(.binary, [1, 2]), .message(.text, bytes("Hello"))])
    }

    // MARK: Failures

    @Test func zipBombStopsAtTheLimit() {
        var encoder = WebSocketEncoder(role: .server, deflate: takeover)
        let bomb = encoder.message(.binary, [UInt8](repeating: 0, count: 8 << 20))
        #expect(bomb.count < 20_000)
        let result = decode(bomb, maxMessageSize: 1 << 20, deflate: takeover, chunkSize: bomb.count)
        #expect(result.failure?.code == .messageTooBig)
        #expect(result.events.isEmpty)
        #expect(decode(bomb, maxMessageSize: 1 << 20, deflate: takeover, chunkSize: 1) == result)
    }

    @Test func decompressedSizeAtAndOverTheLimit() {
        let payload = compressibleBytes(count: 10_000, seed: 4)
        var encoder = WebSocketEncoder(role: .server, deflate: noTakeover)
        let wire = encoder.message(.text, payload)
        #expect(decodeEveryWay(wire, maxMessageSize: payload.count, deflate: noTakeover).events
                == [.message(.text, payload)])
        #expect(decodeEveryWay(wire, maxMessageSize: payload.count - 1, deflate: noTakeover).failure?.code
                == .messageTooBig)
    }

    @Test func corruptDataIs1007() {
        // BTYPE 11 is reserved in DEFLATE (RFC 1951 §3.2.3).
        let result = decodeEveryWay(frame(0x2, [0xFF, 0xFF, 0xFF], rsv: 0b100), deflate: takeover)
        #expect(result.failure?.code == .invalidPayload)
        #expect(result.failure?.reason.contains("invalid compressed data") == true)
    }

    @Test func distanceBeyondAFreshWindowIs1007() {
        // The context-takeover "Hello" without the first message to refer to.
        let result = decodeEveryWay(hex("c1 05 f2 00 11 00 00"), deflate: takeover)
        #expect(result.failure?.code == .invalidPayload)
    }

    @Test func compressedInvalidUTF8Is1007() {
        var encoder = WebSocketEncoder(role: .server, deflate: takeover)
        var wire = encoder.message(.binary, [0x41, 0x42, 0xC0, 0x80] + [UInt8](repeating: 0x41, count: 100))
        wire[0] = 0xC1  // relabel as text
        #expect(decodeEveryWay(wire, deflate: takeover).failure?.code == .invalidPayload)
    }

    /// Found by the fuzzer: when one inflate call produced bad UTF-8 and then
    /// hit corrupt data, the whole input failed on the corruption while a
    /// byte at a time failed on the UTF-8. The verdict must not depend on how
    /// the stream was cut.
    @Test func badUTF8BeforeCorruptDataFailsOnTheUTF8EveryWay() {
        // Raw deflate of "ok\u{FF}" + "abcdefgh" × 20 (sync-flushed, tail
        // removed), then a block with the reserved type 11.
        let payload = hex("ca cf fe 9f 98 94 9c 92 9a 96 9e 31 58 69 00 00") + [0xFF, 0xFF, 0xFF]
        let result = decodeEveryWay(frame(0x1, payload, rsv: 0b100), deflate: takeover)
        #expect(result.failure?.code == .invalidPayload)
        #expect(result.failure?.reason.contains("UTF-8") == true, "\(String(describing: result.failure))")
    }

    /// The same for the size limit: bad UTF-8 inside the allowed size wins
    /// over the limit being passed later in the same inflate call.
    @Test func badUTF8BeforeTheLimitFailsOnTheUTF8EveryWay() {
        let payload = hex("ca cf fe 9f 98 94 9c 92 9a 96 9e 31 58 69 00 00")
        let result = decodeEveryWay(frame(0x1, payload, rsv: 0b100), maxMessageSize: 50, deflate: takeover)
        #expect(result.failure?.code == .invalidPayload)
    }

    /// Found by the fuzzer: one inflate call that passed the limit and then
    /// hit corrupt data reported the corruption (1007) when read whole and
    /// the limit (1009) when read byte by byte.
    @Test func limitBeforeCorruptDataIs1009EveryWay() {
        // Inflates to 17 bytes, then "invalid distance code".
        let wire = hex("c1 2c 32 01 08 0d 08 00 ff")
        let result = decodeEveryWay(wire, maxMessageSize: 16, deflate: PerMessageDeflateParameters())
        #expect(result.failure?.code == .messageTooBig, "\(String(describing: result.failure))")
    }

    /// Found by the fuzzer: a server that negotiated a 9-bit window sent a
    /// back-reference longer than 512 bytes. Inflated whole, zlib copied it
    /// from its output buffer (which holds more than the window) and the
    /// message failed on the UTF-8 that came out; a byte at a time, the
    /// bytes were no longer in the 512-byte window and it failed as corrupt.
    /// The receiver now inflates with the largest window whatever the
    /// sender's bound, so the verdict does not depend on the cutting.
    @Test func aDistancePastTheNegotiatedWindowFailsTheSameEveryWay() {
        // Text, RSV1, FIN, 16-bit length 0xd2d2; the payload is cut short.
        let wire = hex("c1 7e" + String(repeating: " d2", count: 29) + String(repeating: " c3", count: 40) + " ab"
                       + String(repeating: " c3", count: 17) + String(repeating: " 46", count: 66) + " c3"
                       + String(repeating: " d2", count: 9) + " 2e d3 27 07")
        let small = PerMessageDeflateParameters(serverMaxWindowBits: 9, clientMaxWindowBits: 9, minimumSize: 0)
        let result = decodeEveryWay(wire, maxMessageSize: 1 << 20, deflate: small)
        #expect(result.failure?.code == .invalidPayload)
    }

    // MARK: Memory

    @Test func inflaterIsAllocatedLazilyAndReleasedWithoutTakeover() {
        var decoder = WebSocketDecoder(role: .client, maxMessageSize: 1 << 20, deflate: noTakeover)
        #expect(!decoder.holdsHeapMemory)
        _ = feed(&decoder, frame(0x2, [1, 2, 3]), chunkSize: 1)
        #expect(!decoder.holdsHeapMemory)
        #expect(feed(&decoder, hex("c1 07 f2 48 cd c9 c9 07 00"), chunkSize: 1).events == [.message(.text, bytes("Hello"))])
        #expect(!decoder.holdsHeapMemory)

        var keeping = WebSocketDecoder(role: .client, maxMessageSize: 1 << 20, deflate: takeover)
        _ = feed(&keeping, hex("c1 07 f2 48 cd c9 c9 07 00"), chunkSize: 100)
        #expect(keeping.holdsHeapMemory, "context takeover keeps the window")
    }

    // MARK: Round trips

    static let sizes = [0, 1, 63, 64, 65, 125, 126, 1000, 65_535, 65_536, 300_000]

    @Test(arguments: [WebSocketRole.server, .client], [false, true])
    func roundTripsAtManySizes(role: WebSocketRole, noContextTakeover: Bool) {
        let parameters = PerMessageDeflateParameters(serverNoContextTakeover: noContextTakeover,
                                                     clientNoContextTakeover: noContextTakeover, minimumSize: 0)
        var encoder = WebSocketEncoder(role: role, deflate: parameters)
        var decoder = WebSocketDecoder(role: role.peer, maxMessageSize: 8 << 20, deflate: parameters)
        for (index, size) in Self.sizes.enumerated() {
            for payload in [compressibleBytes(count: size, seed: UInt64(index)),
                            pseudoRandomBytes(count: size, seed: UInt64(index))] {
                let kind: WebSocketMessageKind = UTF8Validator.isValid(payload) ? .text : .binary
                let wire = encoder.message(kind, payload)
                #expect(wire[0] & 0x40 != 0, "RSV1 set")
                let result = feed(&decoder, wire, chunkSize: size < 2000 ? 1 : 4093)
                #expect(result == DecodeResult(events: [.message(kind, payload)]), "size \(size)")
            }
        }
    }

    @Test func roundTripOfAFewMebibytes() {
        let payload = compressibleBytes(count: 3 << 20, seed: 77) + pseudoRandomBytes(count: 1 << 20, seed: 78)
        for parameters in [takeover, noTakeover] {
            var encoder = WebSocketEncoder(role: .client, deflate: parameters)
            var decoder = WebSocketDecoder(role: .server, maxMessageSize: 5 << 20, deflate: parameters)
            for _ in 0..<2 {
                let wire = encoder.message(.binary, payload)
                #expect(wire.count < payload.count)
                #expect(feed(&decoder, wire, chunkSize: 65_536) == DecodeResult(events: [.message(.binary, payload)]))
            }
        }
    }

    @Test(arguments: 9...15)
    func roundTripsWithEveryWindowSize(bits: Int) {
        for noContextTakeover in [false, true] {
            let parameters = PerMessageDeflateParameters(
                serverNoContextTakeover: noContextTakeover, clientNoContextTakeover: noContextTakeover,
                serverMaxWindowBits: bits, clientMaxWindowBits: bits, minimumSize: 0)
            for role in [WebSocketRole.server, .client] {
                var encoder = WebSocketEncoder(role: role, deflate: parameters)
                var decoder = WebSocketDecoder(role: role.peer, maxMessageSize: 1 << 20, deflate: parameters)
                for seed in 0..<4 {
                    // Repeats spaced further apart than a small window reaches.
                    let block = compressibleBytes(count: 3000, seed: UInt64(seed))
                    let payload = block + pseudoRandomBytes(count: 40_000, seed: UInt64(seed)) + block
                    let wire = encoder.message(.binary, payload)
                    #expect(feed(&decoder, wire, chunkSize: 1500) == DecodeResult(events: [.message(.binary, payload)]),
                            "window \(bits), takeover \(!noContextTakeover), \(role)")
                }
            }
        }
    }

    @Test func smallMessagesAreNotCompressed() {
        var encoder = WebSocketEncoder(role: .server, deflate: PerMessageDeflateParameters(minimumSize: 64))
        let small = encoder.message(.text, [UInt8](repeating: 0x61, count: 63))
        #expect(small[0] == 0x81)
        let large = encoder.message(.text, [UInt8](repeating: 0x61, count: 64))
        #expect(large[0] == 0xC1)
        #expect(large.count < 64)
    }
}
