/// A wire error code (PROTOCOL.md, "Errors"). Open-ended on purpose: a code a
/// newer hub sends still decodes in an older client.
public struct ErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let badJSON = ErrorCode(rawValue: "bad_json")
    public static let badMessage = ErrorCode(rawValue: "bad_message")
    public static let unknownOp = ErrorCode(rawValue: "unknown_op")
    public static let badField = ErrorCode(rawValue: "bad_field")
    public static let badName = ErrorCode(rawValue: "bad_name")
    public static let badPath = ErrorCode(rawValue: "bad_path")
    public static let tooLarge = ErrorCode(rawValue: "too_large")
    public static let notFound = ErrorCode(rawValue: "not_found")
    public static let conflict = ErrorCode(rawValue: "conflict")
    public static let notANumber = ErrorCode(rawValue: "not_a_number")
    public static let notSubscribed = ErrorCode(rawValue: "not_subscribed")
    public static let binaryNotSupported = ErrorCode(rawValue: "binary_not_supported")
    public static let unsupportedProtocol = ErrorCode(rawValue: "unsupported_protocol")
    public static let unauthorized = ErrorCode(rawValue: "unauthorized")
    public static let forbidden = ErrorCode(rawValue: "forbidden")
    public static let storageFailed = ErrorCode(rawValue: "storage_failed")
    /// The hub's blob quota is used up (REST 507).
    public static let quotaExceeded = ErrorCode(rawValue: "quota_exceeded")
    public static let shuttingDown = ErrorCode(rawValue: "shutting_down")
    /// The hub cannot reach its database (PostgreSQL): the write was not
    /// acknowledged and may or may not have landed, so it is retried with
    /// the same idempotency key, here later or on another hub (REST 503).
    public static let unavailable = ErrorCode(rawValue: "unavailable")
    public static let resnapshot = ErrorCode(rawValue: "resnapshot")
    public static let illegalTransition = ErrorCode(rawValue: "illegal_transition")
    public static let useAdvance = ErrorCode(rawValue: "use_advance")
    public static let insufficientStock = ErrorCode(rawValue: "insufficient_stock")
    public static let tooManySubscriptions = ErrorCode(rawValue: "too_many_subscriptions")
    /// HTTP only: a browser page from an origin the hub does not take.
    public static let originNotAllowed = ErrorCode(rawValue: "origin_not_allowed")
    /// HTTP only: a `Host` an open hub does not answer to (DNS rebinding).
    public static let hostNotAllowed = ErrorCode(rawValue: "host_not_allowed")
    /// HTTP only: a write whose body is not declared as JSON.
    public static let unsupportedMediaType = ErrorCode(rawValue: "unsupported_media_type")
    /// HTTP only: too many connections that have not authenticated.
    public static let tooManyConnections = ErrorCode(rawValue: "too_many_connections")
}

/// An error answer: a stable code, a message that says what to fix, and the
/// extra members the code carries (`field`, `offset`, `version`, …).
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    public var details: JSONObject

    public init(_ code: ErrorCode, _ message: String, details: JSONObject = [:]) {
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { "\(code): \(message)" }

    /// `{"code": …, "message": …, …details}`.
    public var json: JSONValue {
        var object = details
        object["code"] = .string(code.rawValue)
        object["message"] = .string(message)
        return .object(object)
    }

    public static func badField(_ field: String, _ message: String) -> ProtocolError {
        ProtocolError(.badField, message, details: ["field": .string(field)])
    }

    public static func badJSON(_ error: JSONError) -> ProtocolError {
        ProtocolError(.badJSON, "the message is not valid JSON: \(error.message)",
                      details: ["offset": .number(JSONNumber(error.offset))])
    }

    /// Maps a path error to `bad_path`, `not_a_number` or `bad_path` for
    /// operations that do not fit the record's shape.
    public static func path(_ error: RecordPathError, field: String = "path") -> ProtocolError {
        var details: JSONObject = ["field": .string(field)]
        if let offset = error.offset { details["offset"] = .number(JSONNumber(offset)) }
        switch error.kind {
        case .notANumber, .sumOutOfRange:
            return ProtocolError(.notANumber, error.message)
        case .emptyPath, .emptyKey, .controlCharacter, .unexpectedCharacter, .invalidIndex,
             .indexTooLarge, .pathTooLong, .tooManySegments, .rootNotObject, .indexAtRoot,
             .notAContainer, .indexPastEnd:
            return ProtocolError(.badPath, error.message, details: details)
        }
    }
}
