import Testing
import TallyHTTP

/// What feeding some bytes to a fresh parser produced.
struct Outcome: Equatable {
    var requests: [HTTPRequest] = []
    /// The header sections reported before a body (`.head`).
    var heads: [HTTPRequest] = []
    var failure: HTTPParseError?
    /// Bytes consumed in total (for a failure: up to the byte that revealed it).
    var consumed = 0
    var endedIdle = true

    /// The one request, when there was exactly one and no failure.
    var request: HTTPRequest? {
        failure == nil && requests.count == 1 ? requests[0] : nil
    }
}

/// Feeds `chunks` in order to one parser, calling `parse` again on what is
/// left of a chunk after each request, and stops at the first failure.
///
/// The parser reports heads (as the server's does), and every request with a
/// body must have been announced by a head equal to it without the body.
func feed(_ chunks: [[UInt8]], limits: HTTPLimits = HTTPLimits()) -> Outcome {
    var parser = HTTPRequestParser(limits: limits, reportsHeads: true)
    var outcome = Outcome()
    for chunk in chunks {
        var offset = 0
        repeat {
            let (consumed, result) = chunk[offset...].withUnsafeBytes { parser.parse($0) }
            offset += consumed
            outcome.consumed += consumed
            switch result {
            case .needMore:
                #expect(offset == chunk.count, "needMore must consume everything")
            case .head(let head):
                #expect(head.body.isEmpty, "a head carries no body")
                outcome.heads.append(head)
            case .request(let request):
                outcome.requests.append(request)
                var bare = request
                bare.body = []
                if outcome.heads.last == bare { continue }
                #expect(request.body.isEmpty, "a request with a body came without its head")
            case .failure(let error):
                outcome.failure = error
                outcome.endedIdle = parser.isIdle
                // A failed parser stays failed and consumes nothing more.
                let (again, result) = [UInt8]("GET / HTTP/1.1\r\n".utf8).withUnsafeBytes { parser.parse($0) }
                #expect(again == 0 && result == .failure(error))
                return outcome
            }
        } while offset < chunk.count
    }
    outcome.endedIdle = parser.isIdle
    return outcome
}

/// Parses `input` whole, one byte at a time and split in two at every
/// position, expects all of them to agree, and returns the outcome.
///
/// This is the property every parser test relies on: where the socket
/// happens to split the stream must never change the result.
func parse(_ input: [UInt8], limits: HTTPLimits = HTTPLimits(),
           sourceLocation: SourceLocation = #_sourceLocation) -> Outcome {
    let whole = feed([input], limits: limits)
    let byteByByte = feed(input.map { [$0] }, limits: limits)
    #expect(byteByByte == whole, "one byte at a time differs from all at once", sourceLocation: sourceLocation)
    if input.count <= 1024 {
        for split in input.indices.dropFirst() {
            let halves = feed([Array(input[..<split]), Array(input[split...])], limits: limits)
            #expect(halves == whole, "split at \(split) differs from all at once", sourceLocation: sourceLocation)
            if halves != whole { break }
        }
    }
    return whole
}

func parse(_ text: String, limits: HTTPLimits = HTTPLimits(),
           sourceLocation: SourceLocation = #_sourceLocation) -> Outcome {
    parse(Array(text.utf8), limits: limits, sourceLocation: sourceLocation)
}

/// Limits small enough to cross with short test inputs.
func smallLimits(requestLine: Int = 64, headerCount: Int = 4, headerBytes: Int = 128, body: Int = 16) -> HTTPLimits {
    var limits = HTTPLimits()
    limits.maxRequestLineBytes = requestLine
    limits.maxHeaderCount = headerCount
    limits.maxHeaderBytes = headerBytes
    limits.maxBodyBytes = body
    return limits
}

extension HTTPRequest {
    var bodyText: String { String(decoding: body, as: UTF8.self) }
}
