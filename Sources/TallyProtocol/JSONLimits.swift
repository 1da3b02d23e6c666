/// Bounds that keep a hostile peer from making the parser hold unbounded
/// memory or recurse without end.
///
/// Every limit is checked when the byte that crosses it is reached, so the
/// parser never builds more than the limit before failing. RFC 8259 §9 allows
/// this: "An implementation may set limits on the size of texts that it
/// accepts. An implementation may set limits on the maximum depth of nesting.
/// An implementation may set limits on the range and precision of numbers.
/// An implementation may set limits on the length and character contents of
/// strings."
public struct JSONLimits: Sendable, Hashable {
    /// Most nested arrays and objects; `[[1]]` has depth 2. The parser keeps
    /// its own stack, so even a deeper limit cannot overflow the thread's
    /// stack while parsing.
    public var maxDepth = 64
    /// Largest input, whitespace included. Checked before the first byte is read.
    public var maxBytes = 1 << 20
    /// Longest string (member names included), counted in decoded UTF-8 bytes.
    public var maxStringBytes = 256 << 10
    /// Most elements in one array.
    public var maxArrayElements = 100_000
    /// Most members in one object.
    public var maxObjectMembers = 10_000

    public init() {}

    /// For bytes this process serialized itself (stored records and pushes):
    /// no size limits, and a depth no record can reach.
    public static let stored = JSONLimits(maxDepth: 512, maxBytes: .max, maxStringBytes: .max,
                                          maxArrayElements: .max, maxObjectMembers: .max)

    public init(
        maxDepth: Int = 64, maxBytes: Int = 1 << 20, maxStringBytes: Int = 256 << 10,
        maxArrayElements: Int = 100_000, maxObjectMembers: Int = 10_000
    ) {
        self.maxDepth = maxDepth
        self.maxBytes = maxBytes
        self.maxStringBytes = maxStringBytes
        self.maxArrayElements = maxArrayElements
        self.maxObjectMembers = maxObjectMembers
    }
}
