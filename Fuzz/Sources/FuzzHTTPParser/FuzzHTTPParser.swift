// libFuzzer target for HTTPRequestParser (RFC 9112 request framing).
//
// Input layout:
//   byte 0  config: bits 0-1 limits preset; bits 2-3 chunk-size spread
//   byte 1  chunk seed
//   rest    the byte stream of one connection (pipelined requests)
import FuzzSupport
import TallyHTTP

@_cdecl("FuzzHTTPParser_main")
func fuzzHTTPParserMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzerDriver(argc: argc, argv: argv) { data, size in
        fuzzOne(FuzzInput(data, size))
        return 0
    }
}

func limitsPreset(_ index: UInt8) -> HTTPLimits {
    var limits = HTTPLimits()
    switch index & 3 {
    case 1:  // small, so short inputs reach every limit
        limits.maxRequestLineBytes = 64
        limits.maxHeaderCount = 4
        limits.maxHeaderBytes = 200
        limits.maxBodyBytes = 100
    case 2:  // tiny
        limits.maxRequestLineBytes = 16
        limits.maxHeaderCount = 1
        limits.maxHeaderBytes = 32
        limits.maxBodyBytes = 0
    case 3:  // no body limit to speak of
        limits.maxBodyBytes = Int.max
    default:
        break
    }
    return limits
}

/// Limits no re-serialized request of a fuzz input can reach.
let roomyLimits: HTTPLimits = {
    var limits = HTTPLimits()
    limits.maxRequestLineBytes = 1 << 24
    limits.maxHeaderCount = 1 << 20
    limits.maxHeaderBytes = 1 << 24
    limits.maxBodyBytes = Int.max
    return limits
}()

/// One request or failure, and the stream offset just past its last consumed byte.
struct Outcome: Equatable {
    var end: Int
    var result: HTTPParseResult
}

struct Run: Equatable {
    var outcomes: [Outcome] = []
    var failed = false
    var idleAtEnd = true
}

/// Parses `stream` delivered in `ranges`, taking every pipelined request out
/// of each delivery, and checks the parser's contract on every call.
func parse(_ stream: [UInt8], ranges: [Range<Int>], limits: HTTPLimits) -> Run {
    // Heads are reported as the server's parser reports them, so their
    // positions are part of what every cutting must agree on.
    var parser = HTTPRequestParser(limits: limits, reportsHeads: true)
    var run = Run()
    var failure: HTTPParseError?
    stream.withUnsafeBytes { all in
        for range in ranges {
            var offset = range.lowerBound
            while true {
                let available = range.upperBound - offset
                let (consumed, result) = parser.parse(UnsafeRawBufferPointer(rebasing: all[offset..<range.upperBound]))
                check(consumed >= 0 && consumed <= available, "consumed \(consumed) of \(available) bytes")
                if let failure {
                    check(consumed == 0, "a call after failure consumed \(consumed) bytes")
                    check(result == .failure(failure), "after failure '\(failure)' a call returned \(describe(result))")
                    break
                }
                switch result {
                case .needMore:
                    check(consumed == available, ".needMore consumed \(consumed) of \(available) bytes")
                case .head(let head):
                    check(consumed > 0, "a head with no byte consumed")
                    check(head.body.isEmpty, "a head carries a body")
                    run.outcomes.append(Outcome(end: offset + consumed, result: result))
                case .request(let request):
                    check(consumed > 0, "a request completed with no byte consumed")
                    checkRequest(request, limits)
                    if case .head(let head)? = run.outcomes.last?.result {
                        var bare = request
                        bare.body = []
                        check(bare == head, "a request differs from its head: \(describe(.head(head))) vs \(describe(result))")
                    }
                    run.outcomes.append(Outcome(end: offset + consumed, result: result))
                case .failure(let error):
                    check(consumed > 0, "a failure consumed nothing: \(error)")
                    check(error.status.code >= 400 && error.status.code < 600, "failure with status \(error.status)")
                    failure = error
                    run.failed = true
                    run.outcomes.append(Outcome(end: offset + consumed, result: result))
                }
                offset += consumed
                switch result {
                case .request, .head: if offset < range.upperBound { continue }
                default: break
                }
                break
            }
        }
    }
    if let failure {
        check(!parser.isIdle, "a failed parser says it is idle")
        let again = Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8).withUnsafeBytes { parser.parse($0) }
        check(again.consumed == 0 && again.result == .failure(failure), "parse after failure returned \(again)")
    }
    run.idleAtEnd = parser.isIdle
    return run
}

func isTokenChar(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
    default: return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
    }
}

func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

/// Elements of a comma-separated list, OWS trimmed, empty ones dropped.
func listElements(_ value: String) -> [String] {
    value.split(separator: ",", omittingEmptySubsequences: false).compactMap { element -> String? in
        let bytes = Array(element.utf8)
        guard let first = bytes.firstIndex(where: { !isWhitespace($0) }),
              let last = bytes.lastIndex(where: { !isWhitespace($0) }) else { return nil }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}

func checkRequest(_ request: HTTPRequest, _ limits: HTTPLimits) {
    check(request.body.count <= limits.maxBodyBytes, "body of \(request.body.count) bytes over \(limits.maxBodyBytes)")
    check(request.headers.count <= limits.maxHeaderCount,
          "\(request.headers.count) header fields over \(limits.maxHeaderCount)")
    check(!request.method.isEmpty && request.method.utf8.allSatisfy(isTokenChar), "method '\(request.method)'")
    check(!request.target.isEmpty && request.target.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != 0x23 },
          "target '\(request.target)'")
    // The request line is method SP target SP version.
    check(request.method.utf8.count + 1 + request.target.utf8.count + 1 + 8 <= limits.maxRequestLineBytes,
          "request line longer than \(limits.maxRequestLineBytes)")
    check(request.version.major == 1 && (0...9).contains(request.version.minor), "version \(request.version)")
    check(request.path == "*" || request.path.hasPrefix("/"), "path '\(request.path)'")
    var headerBytes = 0
    for field in request.headers.fields {
        check(!field.name.isEmpty && field.name.utf8.allSatisfy(isTokenChar), "field name '\(field.name)'")
        check(!field.value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }, "field value with CR, LF or NUL")
        check(field.value.utf8.first.map { !isWhitespace($0) } ?? true
              && field.value.utf8.last.map { !isWhitespace($0) } ?? true, "field value not trimmed")
        headerBytes += field.name.utf8.count + 1 + field.value.utf8.count + 2
    }
    _ = headerBytes  // values may have grown (obs-text decodes to U+FFFD), so no exact bound
    let hosts = request.headers.values("Host").count
    check(request.version.minor == 0 ? hosts <= 1 : hosts == 1, "\(hosts) Host fields in \(request.version)")
    let lengths = request.headers.values("Content-Length")
    let codings = request.headers.values("Transfer-Encoding")
    check(lengths.isEmpty || codings.isEmpty, "both Content-Length and Transfer-Encoding")
    if !codings.isEmpty {
        check(request.version.minor >= 1, "Transfer-Encoding in HTTP/1.0")
        let elements = codings.flatMap(listElements)
        check(elements.count == 1 && elements[0].lowercased() == "chunked", "Transfer-Encoding \(codings)")
    } else if !lengths.isEmpty {
        // RFC 9112 §6.3: repeated values must be "the same decimal value"
        // (leading zeros allowed, so "05" and "5" agree).
        let values = lengths.flatMap(listElements).map { element -> String in
            let digits = element.drop { $0 == "0" }
            return digits.isEmpty ? "0" : String(digits)
        }
        check(!values.isEmpty && values.allSatisfy { $0 == values[0] && $0.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } },
              "Content-Length values \(lengths)")
        check(Int(values[0]) == request.body.count, "Content-Length \(values[0]) but a body of \(request.body.count) bytes")
    } else {
        check(request.body.isEmpty, "a body of \(request.body.count) bytes without framing")
    }
    roundTrip(request)
}

/// Writes the request back out (with its body chunked again when it came
/// chunked) and parses it again: the result must be the same request.
func roundTrip(_ request: HTTPRequest) {
    var wire = Array("\(request.method) \(request.target) \(request.version)\r\n".utf8)
    for field in request.headers.fields {
        wire += Array("\(field.name): \(field.value)\r\n".utf8)
    }
    wire += Array("\r\n".utf8)
    if request.headers.contains("Transfer-Encoding") {
        if !request.body.isEmpty {
            wire += Array("\(String(request.body.count, radix: 16))\r\n".utf8) + request.body + Array("\r\n".utf8)
        }
        wire += Array("0\r\n\r\n".utf8)
    } else {
        wire += request.body
    }
    var parser = HTTPRequestParser(limits: roomyLimits)
    let (consumed, result) = wire.withUnsafeBytes { parser.parse($0) }
    check(consumed == wire.count, "re-serialized request: consumed \(consumed) of \(wire.count) bytes, \(describe(result))")
    check(result == .request(request), "re-serialized request parses differently: \(describe(result)) vs \(describe(.request(request)))")
}

func describe(_ result: HTTPParseResult) -> String {
    switch result {
    case .needMore: return "needMore"
    case .head(let r): return "head(\(r.method) \(r.target), \(r.headers.count) fields)"
    case .failure(let error): return "failure(\(error))"
    case .request(let r):
        return "request(\(r.method) \(r.target) \(r.version), path '\(r.path)', query \(String(describing: r.query)), " +
            "\(r.headers.count) fields \(r.headers.fields.map { "\($0.name): \($0.value)" }), " +
            "\(r.body.count)-byte body, keepAlive \(r.keepAlive))"
    }
}

func describe(_ run: Run) -> String {
    run.outcomes.map { "@\($0.end) \(describe($0.result))" }.joined(separator: "\n    ") + "\n    idle at end: \(run.idleAtEnd)"
}

func fuzzOne(_ input: FuzzInput) {
    var input = input
    let config = input.byte()
    let seed = input.byte()
    let limits = limitsPreset(config)
    let stream = Array(input.rest)

    let whole = parse(stream, ranges: stream.isEmpty ? [] : [0..<stream.count], limits: limits)
    trace("limits preset \(config & 3):\n    \(describe(whole))")
    let bytewise = parse(stream, ranges: (0..<stream.count).map { $0..<($0 + 1) }, limits: limits)
    check(whole == bytewise, "whole vs byte-by-byte differ:\n  whole:\n    \(describe(whole))\n  bytewise:\n    \(describe(bytewise))")
    var chunker = Chunker(selector: config >> 2, seed: seed)
    let chunked = parse(stream, ranges: chunker.ranges(count: stream.count), limits: limits)
    check(whole == chunked, "whole vs chunked differ:\n  whole:\n    \(describe(whole))\n  chunked:\n    \(describe(chunked))")
}
