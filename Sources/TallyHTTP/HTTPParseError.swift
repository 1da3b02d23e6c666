/// Why a request could not be parsed: the status to answer with and a message
/// that says what to fix. The connection is closed after answering.
///
/// The message is meant for the client's developer (it ends up in the error
/// envelope), so it names the offending part of the request.
public struct HTTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: HTTPStatus
    public var message: String

    public init(status: HTTPStatus, message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { "\(status): \(message)" }
}
