extension HTTPRequestParser {
    /// What the end of the header section leads to.
    enum BodyStart {
        case complete
        case body
        case failure(HTTPParseError)
    }

    /// Handles a field line once its CRLF arrived: trims the value and acts
    /// on the fields that frame the message, as soon as they are seen, so an
    /// oversized Content-Length is refused before the rest of the headers.
    /// Framing fields are examined as bytes, before any String is made.
    mutating func finishFieldLine() -> HTTPParseError? {
        defer { line.removeAll(keepingCapacity: true) }
        // RFC 9112 §5.1: the field value excludes leading and trailing OWS.
        var start = 0, end = line.count
        while start < end && ASCII.isWhitespace(line[start]) { start += 1 }
        while end > start && ASCII.isWhitespace(line[end - 1]) { end -= 1 }

        // RFC 9112 §7.1.2: trailer fields "can be discarded"; nothing in Tally
        // reads them, and merging them into the headers would let a client
        // smuggle framing fields past the checks below.
        if inTrailers { return nil }

        if let kind = fieldKind {
            let range = start..<end
            let outcome = line.withUnsafeBufferPointer { line in
                Self.examine(kind, UnsafeBufferPointer(rebasing: line[range]))
            }
            switch outcome {
            case .contentLength(let length):
                if let earlier = contentLength, earlier != length {
                    return HTTPParseError(status: .badRequest, message: "conflicting Content-Length values")
                }
                contentLength = length
                let limit = limits.maxBodyBytes(target: target)
                if length > limit {
                    let size = length == Int.max ? "over \(Int.max)" : "\(length)"
                    return HTTPParseError(status: .payloadTooLarge,
                                          message: "the body (\(size) bytes) is larger than \(limits.describeBodyLimit(target: target))")
                }
            case .transferCodings(let codings):
                transferCodings = (transferCodings ?? []) + codings
            case .host:
                hostCount += 1
                // RFC 9112 §3.2: a server MUST answer 400 to "any request
                // message that contains more than one Host header field line".
                if hostCount > 1 {
                    return HTTPParseError(status: .badRequest, message: "more than one Host header field")
                }
            case .connection(let close, let keepAlive):
                connectionClose = connectionClose || close
                connectionKeepAlive = connectionKeepAlive || keepAlive
            case .expect(let continues):
                expectsContinue = expectsContinue || continues
            case .failure(let error):
                return error
            }
        }
        headers.add(fieldName, String(decoding: line[start..<end], as: UTF8.self))
        return nil
    }

    /// What a framing field line says.
    enum FieldFact {
        case contentLength(Int)
        case transferCodings([String])
        case host
        case connection(close: Bool, keepAlive: Bool)
        case expect(continues: Bool)
        case failure(HTTPParseError)
    }

    /// Reads a framing field's value.
    static func examine(_ kind: FramingField, _ value: UnsafeBufferPointer<UInt8>) -> FieldFact {
        switch kind {
        case .contentLength:
            return parseContentLength(value)
        case .transferEncoding:
            return .transferCodings(ASCII.listElements(value))
        case .host:
            return .host
        case .connection:
            var close = false, keepAlive = false
            _ = ASCII.anyListElement(value) { option in
                close = close || ASCII.equalsIgnoringCase(option, "close")
                keepAlive = keepAlive || ASCII.equalsIgnoringCase(option, "keep-alive")
                return false
            }
            return .connection(close: close, keepAlive: keepAlive)
        case .expect:
            // RFC 9110 §10.1.1: the only expectation defined is 100-continue.
            return .expect(continues: ASCII.equalsIgnoringCase(value, "100-continue"))
        }
    }

    /// Parses a Content-Length value.
    ///
    /// RFC 9112 §6.3 (5): a list of identical values, or repeated lines with
    /// one value, may be taken as that value; differing values are an
    /// unrecoverable framing error, answered with 400. RFC 9110 §8.6:
    /// `Content-Length = 1*DIGIT`, so signs, spaces inside the number and hex
    /// are all errors.
    static func parseContentLength(_ value: UnsafeBufferPointer<UInt8>) -> FieldFact {
        var result: Int?
        var error: HTTPParseError?
        _ = ASCII.anyListElement(value) { element in
            guard element.allSatisfy(ASCII.isDigit) else {
                let text = String(decoding: element, as: UTF8.self)
                error = HTTPParseError(status: .badRequest, message: "Content-Length must be a decimal number of bytes, not '\(text)'")
                return true
            }
            // Digits beyond Int's range saturate: such a length is too large
            // anyway, and saturating keeps the comparison meaningful.
            var length = 0
            for digit in element {
                let (shifted, overflowA) = length.multipliedReportingOverflow(by: 10)
                let (sum, overflowB) = shifted.addingReportingOverflow(Int(digit - 0x30))
                length = overflowA || overflowB ? Int.max : sum
            }
            if let earlier = result, earlier != length {
                error = HTTPParseError(status: .badRequest, message: "conflicting Content-Length values")
                return true
            }
            result = length
            return false
        }
        if let error { return .failure(error) }
        guard let result else {
            return .failure(HTTPParseError(status: .badRequest, message: "empty Content-Length"))
        }
        return .contentLength(result)
    }

    /// Decides how the body is framed once the header section is complete
    /// (RFC 9112 §6.3), and checks what needs the whole section.
    mutating func startBody() -> BodyStart {
        // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request)
        // status code to any HTTP/1.1 request message that lacks a Host
        // header field".
        if version.minor >= 1 && hostCount == 0 {
            return .failure(HTTPParseError(status: .badRequest, message: "HTTP/1.1 request without a Host header field"))
        }
        if let codings = transferCodings {
            // RFC 9112 §6.1: a message with both "ought to be handled as an
            // error"; a server relying on either one while a proxy in front
            // used the other is how requests get smuggled.
            if contentLength != nil {
                return .failure(HTTPParseError(status: .badRequest,
                                               message: "both Content-Length and Transfer-Encoding are present; send only one"))
            }
            // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has
            // faulty framing (1.0 has no transfer codings).
            if version.minor == 0 {
                return .failure(HTTPParseError(status: .badRequest, message: "Transfer-Encoding is not allowed in an HTTP/1.0 request"))
            }
            // RFC 9112 §6.1: "A server that receives a request message with a
            // transfer coding it does not understand SHOULD respond with 501".
            if let unknown = codings.first(where: { !ASCII.equalsIgnoringCase($0, "chunked") }) {
                return .failure(HTTPParseError(status: .notImplemented,
                                               message: "transfer coding '\(unknown)' is not supported; use chunked"))
            }
            // RFC 9112 §6.1: "A sender MUST NOT apply the chunked transfer
            // coding more than once"; an empty field says nothing at all.
            guard codings.count == 1 else {
                let message = codings.isEmpty ? "empty Transfer-Encoding" : "chunked is applied more than once in Transfer-Encoding"
                return .failure(HTTPParseError(status: .badRequest, message: message))
            }
            state = .chunkSize
            expectContinueIfAsked()
            return .body
        }
        // RFC 9112 §6.3 (7): a request with neither field has no body.
        guard let length = contentLength, length > 0 else { return .complete }
        // Reserve only part of a large body up front: the client may never
        // send it, and the declared length alone should not cost memory.
        body.reserveCapacity(min(length, 64 * 1024))
        state = .body(remaining: length)
        expectContinueIfAsked()
        return .body
    }

    /// RFC 9110 §10.1.1: a client that sent `Expect: 100-continue` may wait
    /// for an interim 100 response before sending the body.
    mutating func expectContinueIfAsked() {
        continueExpected = expectsContinue
    }

    /// Builds the request and starts over with a fresh parser, which also
    /// releases every scratch buffer.
    mutating func complete() -> HTTPParseResult {
        var request = head()
        request.body = body
        self = HTTPRequestParser(limits: limits, reportsHeads: reportsHeads)
        return .request(request)
    }

    /// The request as its header section describes it, without the body
    /// that follows (the scratch stays: the body is still to come).
    ///
    /// RFC 9112 §9.3: HTTP/1.1 connections persist unless `close` is among the
    /// Connection options; HTTP/1.0 ones only when `keep-alive` is (§C.2.2).
    func head() -> HTTPRequest {
        let keepAlive = version.minor >= 1 ? !connectionClose : !connectionClose && connectionKeepAlive
        return HTTPRequest(method: method, target: target, path: path, query: query, version: version,
                           headers: headers, body: [], keepAlive: keepAlive)
    }
}

/// The header fields the parser itself acts on, recognised by length first
/// so that the other fields cost one integer comparison.
enum FramingField {
    case contentLength, transferEncoding, host, connection, expect

    init?(name: UnsafeBufferPointer<UInt8>) {
        switch name.count {
        case 4 where ASCII.equalsIgnoringCase(name, "host"): self = .host
        case 6 where ASCII.equalsIgnoringCase(name, "expect"): self = .expect
        case 10 where ASCII.equalsIgnoringCase(name, "connection"): self = .connection
        case 14 where ASCII.equalsIgnoringCase(name, "content-length"): self = .contentLength
        case 17 where ASCII.equalsIgnoringCase(name, "transfer-encoding"): self = .transferEncoding
        default: return nil
        }
    }
}
