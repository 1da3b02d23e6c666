/// A protocol violation: the connection must be closed with `code`.
///
/// The reason is for logs and for the close frame's reason text; it never
/// contains payload bytes, so it is safe to log.
public struct WebSocketFailure: Error, Sendable, Equatable {
    public var code: WebSocketCloseCode
    public var reason: String
    public init(code: WebSocketCloseCode, reason: String) { self.code = code; self.reason = reason }

    static func protocolError(_ reason: String) -> WebSocketFailure {
        WebSocketFailure(code: .protocolError, reason: reason)
    }
    static func invalidPayload(_ reason: String) -> WebSocketFailure {
        WebSocketFailure(code: .invalidPayload, reason: reason)
    }
    static func messageTooBig(_ reason: String) -> WebSocketFailure {
        WebSocketFailure(code: .messageTooBig, reason: reason)
    }
}
