extension HTTPRequestParser {
    /// Where the parser is in the grammar of RFC 9112 §2.1:
    /// `start-line *( field-line CRLF ) CRLF [ message-body ]`.
    enum State: Sendable {
        /// Before a request: expecting a method or an empty line.
        case idle
        /// Saw the CR of an empty line before the request line.
        case emptyLineLF
        case method
        case target
        case version
        /// Saw the CR ending the request line.
        case requestLineLF
        /// At the start of a field line, or of the empty line ending the
        /// header (or trailer) section.
        case fieldLineStart
        case fieldName
        case fieldValue
        /// Saw the CR ending a field line.
        case fieldLineLF
        /// Saw the CR of the empty line ending the header or trailer section.
        case sectionEndLF
        /// Reading a Content-Length body; `remaining` bytes to go.
        case body(remaining: Int)
        /// Reading the hex digits of a chunk size (RFC 9112 §7.1).
        case chunkSize
        /// After a chunk size: whitespace and chunk extensions up to CRLF.
        /// `started` once the first `;` is seen.
        case chunkExtension(started: Bool)
        case chunkSizeLF
        case chunkData(remaining: Int)
        /// After a chunk's data: its CRLF.
        case chunkDataCR
        case chunkDataLF
        /// A request failed; every later call returns this error.
        case failed(HTTPParseError)
    }
}
