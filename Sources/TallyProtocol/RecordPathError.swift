/// Why a record path was rejected, or why an operation at a path could not be
/// applied: a stable kind to switch on, the offset of the problem in the path
/// text when there is one, and a message that says what to fix.
///
/// Offsets count Unicode scalars from the start of the path text (not bytes,
/// not grapheme clusters): a combining mark after a `.` must not hide the
/// separator, so the parser works scalar by scalar and reports in the same unit.
public struct RecordPathError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of mistake. Closed on purpose: every kind is produced by this
    /// module, and callers map each one exhaustively to a wire error code.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        // Parsing.
        /// The path text was empty.
        case emptyPath
        /// A key segment with no characters (`a..b`, `.a`, `a.`, `a.[0]`).
        case emptyKey
        /// A control character (Unicode general category Cc) inside a key.
        case controlCharacter
        /// A `]` outside an index, or a key character directly after `]`.
        case unexpectedCharacter
        /// An index that is not a plain decimal (`[]`, `[-1]`, `[01]`, `[x]`, `[1`).
        case invalidIndex
        /// An index above `RecordPath.maxIndex`.
        case indexTooLarge
        /// A path text longer than `RecordPath.maxBytes` UTF-8 bytes.
        case pathTooLong
        /// More than `RecordPath.maxSegments` segments.
        case tooManySegments

        // Operations on a record.
        /// The record root is not an object (records are JSON objects).
        case rootNotObject
        /// The path's first segment is an index, but a record root is an object.
        case indexAtRoot
        /// The path goes through a value that cannot hold the next segment
        /// (a key into a scalar or array, an index into a non-array or nothing).
        case notAContainer
        /// An index more than one past the last element of an array.
        case indexPastEnd
        /// `incrementing` found a value that is not a number.
        case notANumber
        /// `incrementing` produced a sum beyond Double's range.
        case sumOutOfRange
    }

    public var kind: Kind
    /// Unicode-scalar offset into the path text; nil for operation errors,
    /// which concern the record rather than the text.
    public var offset: Int?
    public var message: String

    public init(kind: Kind, offset: Int?, message: String) {
        self.kind = kind
        self.offset = offset
        self.message = message
    }

    public var description: String { "record path \(kind.rawValue): \(message)" }
}
