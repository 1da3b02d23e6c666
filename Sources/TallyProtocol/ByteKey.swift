/// A string compared and hashed by its UTF-8 bytes.
///
/// Swift's `String` equality is Unicode canonical equivalence: "é" (C3 A9)
/// equals "e\u{301}" (65 CC 81). Record names, list entries, topics and
/// idempotency keys are identifiers whose bytes are what the store keeps and
/// what clients send, so two byte sequences are two names. Every dictionary
/// keyed by such an identifier uses `ByteKey`, and comparisons use
/// `sameBytes`.
public struct ByteKey: Hashable, Sendable, CustomStringConvertible {
    public let string: String

    public init(_ string: String) { self.string = string }

    public static func == (lhs: ByteKey, rhs: ByteKey) -> Bool { lhs.string.sameBytes(as: rhs.string) }

    public func hash(into hasher: inout Hasher) { JSONValue.hashBytes(of: string, into: &hasher) }

    public var description: String { string }
}

extension String {
    /// Byte-for-byte equality of the UTF-8 forms (not canonical equivalence).
    @inlinable
    public func sameBytes(as other: String) -> Bool { utf8.elementsEqual(other.utf8) }

    /// Whether the UTF-8 form starts with `prefix`'s.
    @inlinable
    public func hasBytePrefix(_ prefix: String) -> Bool { utf8.starts(with: prefix.utf8) }
}
