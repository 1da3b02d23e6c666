/// Literal conformances, so tests and fixtures read as JSON:
/// `let v: JSONValue = ["qty": 3, "tags": ["a", "b"], "ok": true]`.
///
/// There is deliberately no `ExpressibleByNilLiteral`: on a non-Optional type
/// it makes `nil` mean two things wherever a `JSONValue?` is expected. Write `.null`.
extension JSONValue: ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    public init(integerLiteral value: Int64) { self = .number(JSONNumber(value)) }

    /// A float literal is finite unless it overflows at compile time, which is
    /// a programming error in the source, not a runtime condition.
    public init(floatLiteral value: Double) {
        precondition(value.isFinite, "JSON numbers cannot be NaN or infinite")
        self = .number(JSONNumber(finite: value))
    }

    public init(stringLiteral value: String) { self = .string(value) }

    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }

    /// A repeated name keeps the last value (see `JSONObject.init(_:)`).
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements))
    }
}

extension JSONNumber: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    public init(integerLiteral value: Int64) { self.init(value) }

    public init(floatLiteral value: Double) {
        precondition(value.isFinite, "JSON numbers cannot be NaN or infinite")
        self.init(finite: value)
    }
}
