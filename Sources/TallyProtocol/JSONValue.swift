/// A JSON value (RFC 8259 §3), the unit of state the sync engine stores,
/// diffs and sends.
///
/// Equality and hashing compare strings by their UTF-8 bytes, not by Swift's
/// canonical equivalence: two values are equal exactly when they serialize to
/// the same text (up to the spelling of numbers, see `JSONNumber`). A replica
/// that compared `"é"` and `"e\u{301}"` as equal would skip a change another
/// replica sees.
///
/// Parse with `JSONValue.parse(_:limits:)`, write with `serialized()`.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)): return a == b
        case (.string(let a), .string(let b)): return JSONObject.compare(a, b) == 0
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        case (.null, _), (.bool, _), (.number, _), (.string, _), (.array, _), (.object, _): return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .bool(let value): hasher.combine(1 as UInt8); hasher.combine(value)
        case .number(let value): hasher.combine(2 as UInt8); hasher.combine(value)
        case .string(let value): hasher.combine(3 as UInt8); Self.hashBytes(of: value, into: &hasher)
        case .array(let value): hasher.combine(4 as UInt8); hasher.combine(value)
        case .object(let value): hasher.combine(5 as UInt8); hasher.combine(value)
        }
    }

    /// Hashes the UTF-8 bytes (and length, so adjacent strings cannot run together).
    static func hashBytes(of string: String, into hasher: inout Hasher) {
        hasher.combine(string.utf8.count)
        let done: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if done == nil {
            for byte in string.utf8 { hasher.combine(byte) }
        }
    }

    // MARK: Accessors

    /// Nesting depth: 0 for a scalar, 1 for `[]` or `{}`, 2 for `[[]]`, …
    public var depth: Int {
        switch self {
        case .null, .bool, .number, .string: return 0
        case .array(let values): return 1 + (values.lazy.map(\.depth).max() ?? 0)
        case .object(let object): return 1 + (object.lazy.map(\.value.depth).max() ?? 0)
        }
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    public var numberValue: JSONNumber? {
        if case .number(let value) = self { return value }
        return nil
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    public var objectValue: JSONObject? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The member `key` of an object; nil for a missing member or a non-object.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact serialization, so test failures print JSON.
    public var description: String { serializedString }
}
