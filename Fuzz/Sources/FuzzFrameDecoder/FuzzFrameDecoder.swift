// libFuzzer target for WebSocketDecoder (RFC 6455 framing, RFC 7692
// permessage-deflate), plus an encoder → decoder round trip.
//
// Input layout:
//   byte 0  config: bit 0 role (0 server, 1 client); bits 1-3 deflate preset;
//           bits 4 and 7 maxMessageSize; bits 5-6 chunk-size spread
//   byte 1  chunk seed
//   rest    the byte stream fed to the decoder (and, for the round trip,
//           the source of payloads)
import FuzzSupport
#if canImport(Glibc)
import Glibc
#endif
import TallyWebSocket

@_cdecl("FuzzFrameDecoder_main")
func fuzzFrameDecoderMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzerDriver(argc: argc, argv: argv) { data, size in
        fuzzOne(FuzzInput(data, size))
        return 0
    }
}

// MARK: - Configuration

struct Config {
    var role: WebSocketRole
    var deflate: PerMessageDeflateParameters?
    var maxMessageSize: Int
    var chunkSelector: UInt8
    var chunkSeed: UInt8

    init(_ byte: UInt8, seed: UInt8) {
        role = byte & 1 == 0 ? .server : .client
        deflate = Config.deflatePreset(Int((byte >> 1) & 7))
        switch (byte >> 4 & 1) | (byte >> 6 & 2) {
        case 0: maxMessageSize = 1 << 20
        case 1: maxMessageSize = 1024
        case 2: maxMessageSize = 65536
        default: maxMessageSize = 16
        }
        chunkSelector = (byte >> 5) & 3
        chunkSeed = seed
    }

    static func deflatePreset(_ index: Int) -> PerMessageDeflateParameters? {
        typealias P = PerMessageDeflateParameters
        switch index {
        case 1: return P()
        case 2: return P(serverNoContextTakeover: true, clientNoContextTakeover: true)
        case 3: return P(serverMaxWindowBits: 9, clientMaxWindowBits: 9, minimumSize: 0)
        case 5: return P(clientNoContextTakeover: true, serverMaxWindowBits: 12, clientMaxWindowBits: 10,
                         compressionLevel: 1, minimumSize: 1)
        case 6: return P(serverNoContextTakeover: true, clientMaxWindowBits: 11, compressionLevel: 9, minimumSize: 0)
        case 7: return P(clientNoContextTakeover: true, serverMaxWindowBits: 8, clientMaxWindowBits: 8,
                         compressionLevel: 0, minimumSize: 0)
        default: return nil  // 0 and 4: no permessage-deflate
        }
    }
}

// MARK: - Decoding with invariants

/// Everything a decoder produced for one stream: compared across cuttings.
struct Trace: Equatable {
    var events: [WebSocketEvent] = []
    var failure: WebSocketFailure?
    /// How many events preceded the failure.
    var eventsBeforeFailure = 0
}

let expectedFailureCodes: Set<WebSocketCloseCode> = [.protocolError, .invalidPayload, .messageTooBig]

/// Feeds `stream` cut at `ranges`, checking the decoder's contract on every call.
func decode(_ stream: [UInt8], ranges: [Range<Int>], _ config: Config) -> Trace {
    var decoder = WebSocketDecoder(role: config.role, maxMessageSize: config.maxMessageSize, deflate: config.deflate)
    var trace = Trace()
    var closed = false
    stream.withUnsafeBytes { all in
        for range in ranges {
            let chunk = UnsafeRawBufferPointer(rebasing: all[range])
            var emitted: [WebSocketEvent] = []
            let result = decoder.feed(chunk) { emitted.append($0) }
            if let failure = trace.failure {
                // Contract: after a failure, the same failure and no events.
                check(result == failure, "after failure \(failure) a feed returned \(String(describing: result))")
                check(emitted.isEmpty, "a feed after failure \(failure) emitted \(emitted.count) events")
                continue
            }
            if closed {
                // Contract: bytes after a close frame are ignored.
                check(emitted.isEmpty, "a feed after a close frame emitted \(emitted.count) events")
                check(result == nil, "a feed after a close frame failed: \(String(describing: result))")
            }
            for event in emitted {
                check(!closed, "event \(describe(event)) after a close event")
                checkEvent(event, config)
                if case .close = event { closed = true }
            }
            trace.events += emitted
            if let result {
                check(expectedFailureCodes.contains(result.code),
                      "unexpected failure code \(result.code.rawValue): \(result.reason)")
                trace.failure = result
                trace.eventsBeforeFailure = trace.events.count
            }
        }
    }
    // One more (empty and non-empty) feed must keep to the contract.
    if let failure = trace.failure {
        let again = [UInt8(0x81), 0x80, 0, 0, 0, 0].withUnsafeBytes { bytes in
            decoder.feed(bytes) { event in check(false, "feed after failure emitted \(describe(event))") }
        }
        check(again == failure, "feed after failure returned \(String(describing: again)), not \(failure)")
    }
    return trace
}

func checkEvent(_ event: WebSocketEvent, _ config: Config) {
    switch event {
    case .message(let kind, let payload):
        check(payload.count <= config.maxMessageSize,
              "message of \(payload.count) bytes exceeds maxMessageSize \(config.maxMessageSize)")
        if kind == .text {
            check(isValidUTF8(payload), "text message of \(payload.count) bytes is not valid UTF-8")
        }
    case .ping(let payload), .pong(let payload):
        check(payload.count <= 125, "control payload of \(payload.count) bytes")
    case .close(let code, let reason):
        if code == .noStatus {
            check(reason.isEmpty, "close without status has reason '\(reason)'")
        } else {
            check(code.isValidOnWire, "close event with code \(code.rawValue), not valid on the wire")
        }
        check(reason.utf8.count <= 123, "close reason of \(reason.utf8.count) bytes")
        check(isValidUTF8(Array(reason.utf8)), "close reason not valid UTF-8")
    }
}

func describe(_ event: WebSocketEvent) -> String {
    switch event {
    case .message(let kind, let payload): return "message(\(kind), \(payload.count) bytes)"
    case .ping(let payload): return "ping(\(payload.count) bytes)"
    case .pong(let payload): return "pong(\(payload.count) bytes)"
    case .close(let code, let reason): return "close(\(code.rawValue), \(reason.utf8.count) bytes)"
    }
}

func describe(_ trace: Trace) -> String {
    let events = trace.events.map(describe).joined(separator: ", ")
    let failure = trace.failure.map { "failure \($0.code.rawValue) '\($0.reason)' after \(trace.eventsBeforeFailure) events" } ?? "no failure"
    return "[\(events)] \(failure)"
}

// MARK: - The target

/// Whole, byte-by-byte and chunked decoding must agree exactly.
func sameOutcome(_ a: Trace, _ b: Trace) -> Bool { a == b }

func fuzzOne(_ input: FuzzInput) {
    var input = input
    let config = Config(input.byte(), seed: input.byte())
    let stream = Array(input.rest)

    // 1. Differential: whole, one byte at a time, and fuzz-derived chunks.
    let whole = decode(stream, ranges: stream.isEmpty ? [] : [0..<stream.count], config)
    trace("role \(config.role), deflate \(String(describing: config.deflate)), max \(config.maxMessageSize): \(describe(whole))")
    let bytewise = decode(stream, ranges: (0..<stream.count).map { $0..<($0 + 1) }, config)
    check(sameOutcome(whole, bytewise),
          "whole vs byte-by-byte differ:\n  whole:    \(describe(whole))\n  bytewise: \(describe(bytewise))")
    var chunker = Chunker(selector: config.chunkSelector, seed: config.chunkSeed)
    let chunked = decode(stream, ranges: chunker.ranges(count: stream.count), config)
    check(sameOutcome(whole, chunked),
          "whole vs chunked differ:\n  whole:   \(describe(whole))\n  chunked: \(describe(chunked))")

    // 2. Round trip: encoder output of payloads taken from the stream decodes
    //    to the same messages.
    roundTrip(stream, config)
}

/// Close codes an endpoint may send.
let sendableCloseCodes: [WebSocketCloseCode] = [.normal, .goingAway, .protocolError, .unsupportedData,
                                                .invalidPayload, .policyViolation, .messageTooBig,
                                                .internalError, .serviceRestart, WebSocketCloseCode(rawValue: 3000),
                                                WebSocketCloseCode(rawValue: 4999), .noStatus]

func roundTrip(_ stream: [UInt8], _ config: Config) {
    let receiver = config.role
    let sender: WebSocketRole = receiver == .server ? .client : .server
    var encoder = WebSocketEncoder(role: sender, deflate: config.deflate)
    var decoder = WebSocketDecoder(role: receiver, maxMessageSize: config.maxMessageSize, deflate: config.deflate)
    var random = Chunker(selector: 3, seed: config.chunkSeed ^ 0x5A)
    var position = 0
    var step = 0

    while position <= stream.count && step < 64 {
        step += 1
        let length = min(stream.count - position, Int(random.next() % 1500))
        let piece = Array(stream[position..<(position + length)])
        position += length
        let action = random.next() % 8
        var expected: [WebSocketEvent] = []
        var expectedFailure: WebSocketCloseCode?
        var isLast = position >= stream.count
        let wire: [UInt8] = piece.withUnsafeBytes { payload in
            switch action {
            case 0...3:
                let kind: WebSocketMessageKind = isValidUTF8(piece) && action != 3 ? .text : .binary
                if piece.count <= config.maxMessageSize {
                    expected = [.message(kind, piece)]
                } else {
                    expectedFailure = .messageTooBig
                }
                return encoder.message(kind, payload)
            case 4:
                let kind: WebSocketMessageKind = isValidUTF8(piece) ? .text : .binary
                let fragmentSize = Int(random.next() % 200)
                if piece.count <= config.maxMessageSize {
                    expected = [.message(kind, piece)]
                } else {
                    expectedFailure = .messageTooBig
                }
                return encoder.fragmentedMessage(kind, payload, fragmentSize: fragmentSize)
            case 5:
                expected = [.ping(Array(piece.prefix(125)))]
                return encoder.ping(payload)
            case 6:
                expected = [.pong(Array(piece.prefix(125)))]
                return encoder.pong(payload)
            default:
                let code = sendableCloseCodes[Int(random.next() % UInt64(sendableCloseCodes.count))]
                let reason = String(decoding: piece, as: UTF8.self)
                isLast = true
                if code.isValidOnWire {
                    // Cut at the last code point boundary within 123 bytes.
                    var bytes = Array(reason.utf8)
                    if bytes.count > 123 {
                        var cut = 123
                        while cut > 0 && bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
                        bytes.removeSubrange(cut...)
                    }
                    expected = [.close(code, reason: String(decoding: bytes, as: UTF8.self))]
                } else {
                    expected = [.close(.noStatus, reason: "")]
                }
                return encoder.close(code, reason: reason)
            }
        }

        var events: [WebSocketEvent] = []
        var failure: WebSocketFailure?
        wire.withUnsafeBytes { all in
            for range in random.ranges(count: all.count) where failure == nil {
                failure = decoder.feed(UnsafeRawBufferPointer(rebasing: all[range])) { events.append($0) }
            }
        }
        let what = "round trip step \(step) (action \(action), \(piece.count)-byte payload, \(wire.count)-byte wire, " +
            "sender \(sender), deflate \(String(describing: config.deflate)), max \(config.maxMessageSize))"
        if let expectedFailure {
            check(failure?.code == expectedFailure,
                  "\(what): expected failure \(expectedFailure.rawValue), got \(String(describing: failure)) and \(events.map(describe))")
            return
        }
        check(failure == nil, "\(what): unexpected failure \(String(describing: failure))")
        check(events == expected, "\(what): decoded \(events.map(describe)), expected \(expected.map(describe))")
        if isLast { return }
    }
}
