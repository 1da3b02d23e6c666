/// A JSON number that keeps integers exact.
///
/// RFC 8259 §6 leaves precision to implementations and warns that "numbers
/// that are integers and are in the range [-(2**53)+1, (2**53)-1] are
/// interoperable". Sync payloads carry counters, versions and ids that must
/// survive a round trip exactly, so an integer literal that fits is kept as an
/// `Int64`; anything else (a fraction, an exponent, an integer beyond Int64)
/// becomes a `Double`.
///
/// Equality is numeric: `1` and `1.0` are the same number (and hash alike),
/// because a peer that wrote either meant the same value. Serialization keeps
/// the kind, though: an integer is written without a decimal point, a Double
/// in Swift's shortest round-trip form (`1.0`, `0.1`, `1e+300`, `-0.0`).
///
/// NaN and the infinities are not JSON numbers, so a `JSONNumber` can never
/// hold one: `init?(_: Double)` refuses them and the parser rejects literals
/// beyond Double's range.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    @usableFromInline
    enum Storage: Sendable {
        case int(Int64)
        case double(Double)
    }

    @usableFromInline
    let storage: Storage

    public init(_ value: Int64) { storage = .int(value) }

    public init(_ value: Int) { storage = .int(Int64(value)) }

    /// Returns nil for NaN and ±infinity, which JSON cannot represent
    /// (RFC 8259 §6: "Numeric values that cannot be represented in the
    /// grammar below (such as Infinity and NaN) are not permitted").
    public init?(_ value: Double) {
        guard value.isFinite else { return nil }
        storage = .double(value)
    }

    /// For the parser, which has already checked finiteness.
    init(finite value: Double) { storage = .double(value) }

    /// True when the number was written (or created) as an integer.
    public var isInteger: Bool {
        if case .int = storage { return true }
        return false
    }

    /// The value as an Int64 when it is one exactly: an integer, or a Double
    /// with no fractional part inside Int64's range (`2.0` → 2, `2.5` → nil).
    public var int64Value: Int64? {
        switch storage {
        case .int(let value): return value
        case .double(let value): return Self.exactInt64(value)
        }
    }

    /// The value as a Double, rounded when an Int64 has more than 53 significant bits.
    public var doubleValue: Double {
        switch storage {
        case .int(let value): return Double(value)
        case .double(let value): return value
        }
    }

    public var description: String {
        switch storage {
        case .int(let value): return value.description
        case .double(let value): return value.description
        }
    }

    /// `Int64(exactly:)` but without trapping: 2^63 itself is out of range,
    /// although `Double(Int64.max)` rounds up to it.
    static func exactInt64(_ value: Double) -> Int64? {
        guard value >= -9.223372036854775808e18, value < 9.223372036854775808e18 else { return nil }
        return Int64(exactly: value)
    }

    public static func == (lhs: JSONNumber, rhs: JSONNumber) -> Bool {
        switch (lhs.storage, rhs.storage) {
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)):
            // Compare exactly; `Double(a) == b` would call Int64.max equal to 2^63.
            return exactInt64(b) == a
        }
    }

    /// Integral values hash as their Int64 so `1`, `1.0` (and `0`, `-0.0`) agree.
    public func hash(into hasher: inout Hasher) {
        switch storage {
        case .int(let value):
            hasher.combine(value)
        case .double(let value):
            if let exact = Self.exactInt64(value) {
                hasher.combine(exact)
            } else {
                hasher.combine(value)
            }
        }
    }
}
