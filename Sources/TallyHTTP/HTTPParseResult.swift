/// What one call to `HTTPRequestParser.parse(_:)` produced.
public enum HTTPParseResult: Sendable, Equatable {
    /// Every byte given was consumed and the request is not complete yet.
    case needMore
    /// One complete request; bytes after it were left unconsumed.
    case request(HTTPRequest)
    /// The request is malformed or over a limit; answer with the error's
    /// status and close the connection.
    case failure(HTTPParseError)
}
