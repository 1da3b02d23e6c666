import TallyPostgres

/// A failure of one of the tables that hubs sharing a PostgreSQL database
/// keep besides the store's (photos, clients' sync health): whether the
/// database could not be reached — which the hub answers with 503 and a
/// retry — or refused the statement, and what it said.
///
/// Never carries a password: PostgreSQL errors name the server by its
/// redacted URL.
public struct SharedTableError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No session to the database: it could not be made, or it broke and a
    /// new one could not be made either. Retrying later may succeed.
    public var unreachable: Bool
    /// What the table was doing: "store a photo", "publish client rows".
    public var operation: String
    /// PostgreSQL's words (SQLSTATE, message, detail, the server), for logs.
    public var detail: String

    public init(unreachable: Bool, operation: String, detail: String) {
        self.unreachable = unreachable
        self.operation = operation
        self.detail = detail
    }

    init(_ error: PostgresError, doing operation: String) {
        self.init(unreachable: error.isConnectionLost, operation: operation, detail: error.description)
    }

    public var description: String {
        "\(operation): \(unreachable ? "the database is unreachable: " : "")\(detail)"
    }
}
