/// A value bound to, or read from, an SQL statement.
public enum SQLValue: Equatable, Sendable {
    case null
    case int(Int64)
    case real(Double)
    case text(String)

    public var int: Int64? { if case .int(let value) = self { value } else { nil } }
    /// A REAL column, or an INTEGER one read as a number.
    public var real: Double? {
        switch self {
        case .real(let value): value
        case .int(let value): Double(value)
        default: nil
        }
    }
    public var text: String? { if case .text(let value) = self { value } else { nil } }

    public init(_ text: String?) { self = text.map { .text($0) } ?? .null }
    public init(_ int: Int64?) { self = int.map { .int($0) } ?? .null }
    public init(_ int: Int?) { self = int.map { .int(Int64($0)) } ?? .null }
}
