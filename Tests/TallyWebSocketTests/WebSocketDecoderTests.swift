import Testing
@testable import TallyWebSocket

/// The examples of RFC 6455 §5.7 and well-formed streams, each decoded whole
/// and in every small chunking.
@Suite struct WebSocketDecoderFrameTests {
    @Test func singleFrameUnmaskedText() {
        let result = decodeEveryWay(hex("81 05 48 65 6c 6c 6f"), role: .client)
        #expect(result == DecodeResult(events: [.message(.text, bytes("Hello"))]))
    }

    @Test func singleFrameMaskedText() {
        let result = decodeEveryWay(hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"), role: .server)
        #expect(result == DecodeResult(events: [.message(.text, bytes("Hello"))]))
    }

    @Test func fragmentedUnmaskedText() {
        let result = decodeEveryWay(hex("01 03 48 65 6c 80 02 6c 6f"), role: .client)
        #expect(result == DecodeResult(events: [.message(.text, bytes("Hello"))]))
    }

    @Test func unmaskedPingAndMaskedPong() {
        #expect(decodeEveryWay(hex("89 05 48 65 6c 6c 6f"), role: .client)
                == DecodeResult(events: [.ping(bytes("Hello"))]))
        #expect(decodeEveryWay(hex("8a 85 37 fa 21 3d 7f 9f 4d 51 58"), role: .server)
                == DecodeResult(events: [.pong(bytes("Hello"))]))
    }

    @Test func binary256Bytes() {
        let payload = pseudoRandomBytes(count: 256, seed: 1)
        let input = hex("82 7E 01 00") + payload
        #expect(frame(0x2, payload) == input)
        #expect(decodeEveryWay(input, role: .client) == DecodeResult(events: [.message(.binary, payload)]))
    }

    @Test func binary64KiB() {
        let payload = pseudoRandomBytes(count: 65536, seed: 2)
        let input = hex("82 7F 00 00 00 00 00 01 00 00") + payload
        #expect(frame(0x2, payload) == input)
        let expected = DecodeResult(events: [.message(.binary, payload)])
        #expect(decode(input, chunkSize: input.count) == expected)
        #expect(decode(input, chunkSize: 1) == expected)
        #expect(decode(input, chunkSize: 1000) == expected)
    }

    @Test func masked64KiBAtEveryAlignment() {
        let payload = pseudoRandomBytes(count: 65536 + 5, seed: 3)
        let input = frame(0x2, payload, mask: testMask)
        for chunkSize in [1, 3, 5, 8, 4096, input.count] {
            #expect(decode(input, role: .server, chunkSize: chunkSize)
                    == DecodeResult(events: [.message(.binary, payload)]))
        }
    }

    @Test func controlFramesInterleavedWithFragments() {
        let input = frame(0x1, bytes("Hel"), fin: false, mask: testMask)
            + frame(0x9, bytes("ping"), mask: testMask)
            + frame(0x0, bytes("l"), fin: false, mask: testMask)
            + frame(0xA, [], mask: testMask)
            + frame(0x0, bytes("o"), mask: testMask)
        let result = decodeEveryWay(input, role: .server)
        #expect(result.events == [.ping(bytes("ping")), .pong([]), .message(.text, bytes("Hello"))])
        #expect(result.failure == nil)
    }

    @Test func severalMessagesInOneChunk() {
        let input = frame(0x1, bytes("one")) + frame(0x2, [1, 2, 3]) + frame(0x1, []) + frame(0x2, [])
        let result = decodeEveryWay(input)
        #expect(result.events == [.message(.text, bytes("one")), .message(.binary, [1, 2, 3]),
                                  .message(.text, []), .message(.binary, [])])
    }

    @Test func emptyFragmentsAreJoined() {
        let input = frame(0x2, [], fin: false) + frame(0x0, [7], fin: false) + frame(0x0, [])
        #expect(decodeEveryWay(input).events == [.message(.binary, [7])])
    }

    @Test func nonMinimalLengthEncodingsAreAccepted() {
        let short = frame(0x2, [1, 2, 3, 4, 5], lengthBytes: 2)
        let long = frame(0x2, [1, 2, 3, 4, 5], lengthBytes: 8)
        #expect(decodeEveryWay(short + long).events == [.message(.binary, [1, 2, 3, 4, 5]),
                                                        .message(.binary, [1, 2, 3, 4, 5])])
    }

    @Test func closeWithCodeAndReason() {
        let input = frame(0x8, [0x03, 0xE8] + bytes("bye ✓"), mask: testMask)
        #expect(decodeEveryWay(input, role: .server).events == [.close(.normal, reason: "bye ✓")])
    }

    @Test func emptyCloseReportsNoStatus() {
        #expect(decodeEveryWay(hex("88 00")).events == [.close(.noStatus, reason: "")])
    }

    @Test(arguments: [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999])
    func closeCodesValidOnTheWire(code: Int) {
        let input = frame(0x8, [UInt8(code >> 8), UInt8(code & 0xFF)])
        #expect(decodeEveryWay(input).events == [.close(WebSocketCloseCode(rawValue: UInt16(code)), reason: "")])
    }

    @Test func bytesAfterCloseAreIgnored() {
        let input = hex("88 02 03 e8") + frame(0x1, bytes("late")) + [0xFF, 0xFF, 0xFF]
        let result = decodeEveryWay(input)
        #expect(result == DecodeResult(events: [.close(.normal, reason: "")]))
    }
}

/// Every protocol violation, with the exact close code RFC 6455 asks for.
@Suite struct WebSocketDecoderViolationTests {
    private func expectFailure(_ input: [UInt8], _ code: WebSocketCloseCode, role: WebSocketRole = .client,
                               maxMessageSize: Int = 1 << 24, deflate: PerMessageDeflateParameters? = nil,
                               events: [WebSocketEvent] = [],
                               sourceLocation: SourceLocation = #_sourceLocation) {
        let result = decodeEveryWay(input, role: role, maxMessageSize: maxMessageSize, deflate: deflate,
                                    sourceLocation: sourceLocation)
        #expect(result.failure?.code == code, "\(result.failure?.reason ?? "no failure")",
                sourceLocation: sourceLocation)
        #expect(result.events == events, sourceLocation: sourceLocation)
    }

    @Test func serverRejectsUnmaskedClientFrames() {
        expectFailure(hex("81 05 48 65 6c 6c 6f"), .protocolError, role: .server)
    }

    @Test func clientRejectsMaskedServerFrames() {
        expectFailure(hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"), .protocolError, role: .client)
    }

    @Test func rsv1WithoutDeflate() {
        expectFailure(frame(0x1, bytes("x"), rsv: 0b100), .protocolError)
    }

    @Test(arguments: [UInt8(0b010), 0b001, 0b011, 0b110, 0b111])
    func rsv2AndRsv3AreAlwaysErrors(rsv: UInt8) {
        expectFailure(frame(0x2, [1], rsv: rsv), .protocolError, deflate: PerMessageDeflateParameters())
    }

    @Test func rsv1OnControlFrameWithDeflate() {
        expectFailure(frame(0x9, [], rsv: 0b100), .protocolError, deflate: PerMessageDeflateParameters())
    }

    @Test func rsv1OnContinuationFrameWithDeflate() {
        let input = frame(0x1, hex("f2 48 cd"), fin: false, rsv: 0b100) + frame(0x0, hex("c9 c9 07 00"), rsv: 0b100)
        expectFailure(input, .protocolError, deflate: PerMessageDeflateParameters())
    }

    @Test(arguments: [UInt8(3), 4, 5, 6, 7, 11, 12, 13, 14, 15])
    func reservedOpcodes(opcode: UInt8) {
        expectFailure(frame(opcode, []), .protocolError)
    }

    @Test func controlPayloadOver125() {
        expectFailure(frame(0x9, [UInt8](repeating: 0, count: 126)), .protocolError)
        // Caught at the length byte, before any payload arrives.
        expectFailure(hex("89 7e"), .protocolError)
    }

    @Test func fragmentedControlFrame() {
        expectFailure(frame(0x9, [1], fin: false), .protocolError)
    }

    @Test func continuationWithoutMessage() {
        expectFailure(frame(0x0, bytes("x")), .protocolError)
    }

    @Test func newDataFrameDuringFragmentedMessage() {
        expectFailure(frame(0x1, bytes("a"), fin: false) + frame(0x2, bytes("b")), .protocolError)
    }

    @Test func sixtyFourBitLengthWithTopBitSet() {
        expectFailure(hex("82 7f 80 00 00 00 00 00 00 01"), .protocolError)
    }

    @Test func invalidUTF8InText() {
        expectFailure(frame(0x1, [0x48, 0xC0, 0x80]), .invalidPayload)
    }

    @Test func invalidUTF8FailsBeforeTheFinalFragment() {
        // The second fragment is bad; the final fragment never arrives.
        let input = frame(0x1, bytes("ok "), fin: false) + frame(0x0, [0xED, 0xA0, 0x80], fin: false)
        expectFailure(input, .invalidPayload)
        // And within a single frame, before its end: the header promises 10
        // bytes but only the bad prefix has arrived.
        expectFailure(hex("81 0a 41 ff"), .invalidPayload)
    }

    @Test func codePointSplitAcrossFragmentsIsFine() {
        let euro: [UInt8] = [0xE2, 0x82, 0xAC]
        let input = frame(0x1, [0x41, euro[0]], fin: false) + frame(0x0, [euro[1]], fin: false) + frame(0x0, [euro[2]])
        #expect(decodeEveryWay(input).events == [.message(.text, [0x41] + euro)])
    }

    @Test func incompleteSequenceAtEndOfMessage() {
        expectFailure(frame(0x1, [0x41, 0xE2, 0x82]), .invalidPayload)
    }

    @Test func binaryIsNotValidated() {
        #expect(decodeEveryWay(frame(0x2, [0xFF, 0xC0])).events == [.message(.binary, [0xFF, 0xC0])])
    }

    @Test func messageOverLimitFailsAtTheHeader() {
        expectFailure(frame(0x2, [UInt8](repeating: 1, count: 11)), .messageTooBig, maxMessageSize: 10)
        // The header alone is enough: nothing is buffered.
        expectFailure(hex("82 7f 00 00 00 00 10 00 00 00"), .messageTooBig, maxMessageSize: 1 << 20)
    }

    @Test func fragmentsOverLimit() {
        let input = frame(0x2, [UInt8](repeating: 1, count: 6), fin: false) + frame(0x0, [UInt8](repeating: 2, count: 5))
        expectFailure(input, .messageTooBig, maxMessageSize: 10)
    }

    @Test func messageAtTheLimitIsAccepted() {
        let payload = [UInt8](repeating: 1, count: 10)
        #expect(decodeEveryWay(frame(0x2, payload), maxMessageSize: 10).events == [.message(.binary, payload)])
    }

    @Test func controlFramesDoNotCountTowardsTheLimit() {
        let input = frame(0x2, [1, 2], fin: false) + frame(0x9, [UInt8](repeating: 0, count: 100)) + frame(0x0, [3])
        let result = decodeEveryWay(input, maxMessageSize: 3)
        #expect(result.events == [.ping([UInt8](repeating: 0, count: 100)), .message(.binary, [1, 2, 3])])
    }

    @Test func closeWithOneBytePayload() {
        expectFailure(hex("88 01 03"), .protocolError)
    }

    @Test(arguments: [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535])
    func closeCodesInvalidOnTheWire(code: Int) {
        expectFailure(frame(0x8, [UInt8(code >> 8), UInt8(code & 0xFF)]), .protocolError)
    }

    @Test func closeReasonNotUTF8() {
        expectFailure(frame(0x8, [0x03, 0xE8, 0xC3]), .invalidPayload)
    }

    @Test func eventsBeforeAViolationAreStillEmitted() {
        let input = frame(0x1, bytes("fine")) + frame(0x3, [])
        expectFailure(input, .protocolError, events: [.message(.text, bytes("fine"))])
    }
}

/// The decoder's idle cost: no heap between messages, small inline state.
@Suite struct WebSocketDecoderMemoryTests {
    @Test func inlineStateIsSmall() {
        // Every field is inline; the arrays and the inflater are one word
        // each and point at nothing between messages.
        #expect(MemoryLayout<WebSocketDecoder>.size < 256, "\(MemoryLayout<WebSocketDecoder>.size) bytes")
        #expect(MemoryLayout<WebSocketEncoder>.size < 128, "\(MemoryLayout<WebSocketEncoder>.size) bytes")
    }

    @Test func noHeapBetweenMessages() {
        var decoder = WebSocketDecoder(role: .server, maxMessageSize: 1 << 20)
        #expect(!decoder.holdsHeapMemory)
        let message = frame(0x2, pseudoRandomBytes(count: 5000, seed: 9), mask: testMask)
        // A partial header holds nothing on the heap.
        _ = feed(&decoder, Array(message[0..<3]), chunkSize: 3)
        #expect(!decoder.holdsHeapMemory)
        _ = feed(&decoder, Array(message[3..<100]), chunkSize: 100)
        #expect(decoder.holdsHeapMemory)
        _ = feed(&decoder, Array(message[100...]), chunkSize: 100_000)
        #expect(!decoder.holdsHeapMemory)
        // Ping payloads are released too.
        _ = feed(&decoder, frame(0x9, [1, 2, 3], mask: testMask), chunkSize: 2)
        #expect(!decoder.holdsHeapMemory)
    }

    @Test func noHeapBetweenFragmentedMessages() {
        var decoder = WebSocketDecoder(role: .client, maxMessageSize: 1 << 20)
        let result = feed(&decoder, frame(0x1, bytes("ab"), fin: false), chunkSize: 1)
        #expect(result.events.isEmpty)
        #expect(decoder.holdsHeapMemory)
        _ = feed(&decoder, frame(0x0, bytes("c")), chunkSize: 1)
        #expect(!decoder.holdsHeapMemory)
    }
}
