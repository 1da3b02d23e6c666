/// What one call to `HTTPRequestParser.parse(_:)` produced.
public enum HTTPParseResult: Sendable, Equatable {
    /// Every byte given was consumed and the request is not complete yet.
    case needMore
    /// One complete request; bytes after it were left unconsumed.
    case request(HTTPRequest)
    /// The header section of a request whose body follows (only from a
    /// parser made with `reportsHeads`): the request with an empty body, so
    /// the caller can refuse it — token, route, declared length — before a
    /// byte of the body is read or `100 Continue` is sent. The next call
    /// goes on with the body and ends in `.request` (or `.failure`).
    case head(HTTPRequest)
    /// The request is malformed or over a limit; answer with the error's
    /// status and close the connection.
    case failure(HTTPParseError)
}
