/// The bookkeeping shared by the states of `HTTPRequestParser`: taking runs
/// of bytes into the scratch line while counting them against the limits,
/// and failing for good.
extension HTTPRequestParser {
    /// The end of the run of bytes from `start` that satisfy `accept`.
    @inline(__always)
    func scan(_ input: UnsafeBufferPointer<UInt8>, from start: Int, while accept: (UInt8) -> Bool) -> Int {
        var index = start
        while index < input.count && accept(input[index]) { index += 1 }
        return index
    }

    /// Moves the scratch line out as a String, keeping its capacity for the
    /// next token of this request.
    mutating func takeLine() -> String {
        defer { line.removeAll(keepingCapacity: true) }
        return String(decoding: line, as: UTF8.self)
    }

    /// Appends a run to the request line; if that crosses the limit, returns
    /// the consumed count that ends on the first byte past it.
    mutating func appendToRequestLine(_ input: UnsafeBufferPointer<UInt8>, _ run: Range<Int>) -> Int? {
        let room = limits.maxRequestLineBytes - requestLineBytes
        if run.count > room { return run.lowerBound + room + 1 }
        line.append(contentsOf: UnsafeBufferPointer(rebasing: input[run]))
        requestLineBytes += run.count
        return nil
    }

    /// Counts the byte at `index` against the request line limit.
    mutating func countRequestLineByte(at index: Int) -> Int? {
        requestLineBytes += 1
        return requestLineBytes > limits.maxRequestLineBytes ? index + 1 : nil
    }

    /// Appends a run to the current field line, counting it against the
    /// header section limit.
    mutating func appendToSection(_ input: UnsafeBufferPointer<UInt8>, _ run: Range<Int>) -> Int? {
        let room = limits.maxHeaderBytes - sectionBytes
        if run.count > room { return run.lowerBound + room + 1 }
        line.append(contentsOf: UnsafeBufferPointer(rebasing: input[run]))
        sectionBytes += run.count
        return nil
    }

    mutating func countSectionByte(at index: Int) -> Int? {
        sectionBytes += 1
        return sectionBytes > limits.maxHeaderBytes ? index + 1 : nil
    }

    mutating func countChunkLineByte(at index: Int) -> Int? {
        chunkLineBytes += 1
        return chunkLineBytes > Self.maxChunkLineBytes ? index + 1 : nil
    }

    mutating func fail(_ status: HTTPStatus, _ message: String) -> HTTPParseResult {
        fail(HTTPParseError(status: status, message: message))
    }

    /// Enters the failed state for good and frees the scratch buffers: the
    /// connection is about to be closed, and holding a partial body for it
    /// would only waste memory.
    mutating func fail(_ error: HTTPParseError) -> HTTPParseResult {
        self = HTTPRequestParser(limits: limits, reportsHeads: reportsHeads)
        state = .failed(error)
        return .failure(error)
    }

    mutating func failRequestLineTooLong() -> HTTPParseResult {
        fail(.uriTooLong, "the request line is longer than \(limits.maxRequestLineBytes) bytes")
    }

    mutating func failSectionTooLarge() -> HTTPParseResult {
        fail(.requestHeaderFieldsTooLarge,
             "the \(inTrailers ? "trailer" : "header") section is larger than \(limits.maxHeaderBytes) bytes")
    }

    mutating func failChunkLineTooLong() -> HTTPParseResult {
        fail(.badRequest, "a chunk size line is longer than \(Self.maxChunkLineBytes) bytes")
    }
}
