/// Why a JSON text was rejected: a stable kind to switch on (and to map to a
/// wire error code), the byte offset of the offending byte, and a message that
/// says what to fix.
///
/// The message ends with the offset ("… at byte 17") because it is meant for
/// the peer's developer, who sees only the message in an error envelope.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of mistake. Closed on purpose: every kind is produced by this
    /// module's parser, and callers map each one exhaustively.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// The input ended inside a value (or was empty).
        case unexpectedEnd
        /// A byte that the grammar does not allow where it appears.
        case unexpectedByte
        /// Something other than whitespace after the single top-level value.
        case trailingContent
        /// A number that breaks the RFC 8259 §6 grammar (`01`, `1.`, `-`, `1e`).
        case invalidNumber
        /// A number whose magnitude a Double cannot hold (`1e999`).
        case numberOutOfRange
        /// A backslash followed by something other than the eight escapes of RFC 8259 §7.
        case invalidEscape
        /// A `\u` escape for a surrogate code point with no partner.
        case loneSurrogate
        /// An unescaped U+0000…U+001F inside a string.
        case unescapedControlCharacter
        /// Bytes that are not well-formed UTF-8 (RFC 3629 §4).
        case invalidUTF8
        /// A member name that appears twice in one object.
        case duplicateKey
        /// Nesting deeper than `JSONLimits.maxDepth`.
        case depthLimitExceeded
        /// Input larger than `JSONLimits.maxBytes`.
        case inputLimitExceeded
        /// A string longer than `JSONLimits.maxStringBytes`.
        case stringLimitExceeded
        /// An array with more than `JSONLimits.maxArrayElements` elements.
        case arrayLimitExceeded
        /// An object with more than `JSONLimits.maxObjectMembers` members.
        case objectLimitExceeded
    }

    public var kind: Kind
    /// Offset, from the start of the input, of the byte where the problem was found.
    public var offset: Int
    public var message: String

    public init(kind: Kind, offset: Int, message: String) {
        self.kind = kind
        self.offset = offset
        self.message = message
    }

    public var description: String { "JSON \(kind.rawValue): \(message)" }
}
