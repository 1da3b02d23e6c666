/// A location inside a record: `items[2].qty`, `stage`, `history[0]`, `a.b.c`.
///
/// Clients write at paths and subscribe to paths, so the engine needs one
/// canonical form: `description` renders the segments back into text that
/// parses to the same path (keys cannot contain `.`, `[` or `]`, so no
/// escaping is needed).
///
/// Keys compare by their UTF-8 bytes, as `JSONObject` does, so `"é"` and
/// `"e\u{301}"` are different paths exactly when they are different members.
///
/// Parse with `init(parsing:)`; apply with the `JSONValue` operations in
/// `RecordPath+Operations.swift`.
public struct RecordPath: Sendable, Hashable, CustomStringConvertible {
    public enum Segment: Sendable, Hashable {
        case key(String)
        case index(Int)

        public static func == (lhs: Segment, rhs: Segment) -> Bool {
            switch (lhs, rhs) {
            case (.key(let a), .key(let b)): return JSONObject.compare(a, b) == 0
            case (.index(let a), .index(let b)): return a == b
            case (.key, _), (.index, _): return false
            }
        }

        public func hash(into hasher: inout Hasher) {
            switch self {
            case .key(let key): hasher.combine(0 as UInt8); JSONValue.hashBytes(of: key, into: &hasher)
            case .index(let index): hasher.combine(1 as UInt8); hasher.combine(index)
            }
        }
    }

    /// Longest accepted path text, in UTF-8 bytes.
    public static let maxBytes = 1024
    /// Most segments in one path; deeper paths are almost certainly mistakes
    /// and would make every operation walk further.
    public static let maxSegments = 32
    /// Largest accepted index, so a typo cannot ask for a huge array.
    public static let maxIndex = 1_000_000

    /// Never empty; keys are valid keys and indexes in `0...maxIndex`.
    public let segments: [Segment]

    /// For code in this module that has already validated `segments`.
    init(validated segments: [Segment]) { self.segments = segments }

    /// The canonical text: keys joined by `.`, indexes as `[N]`.
    public var description: String {
        var text = ""
        for (position, segment) in segments.enumerated() {
            switch segment {
            case .key(let key):
                if position > 0 { text += "." }
                text += key
            case .index(let index):
                text += "[\(index)]"
            }
        }
        return text
    }

    /// True when every segment of `self` begins `other` (a path is a prefix of itself).
    public func isPrefix(of other: RecordPath) -> Bool {
        segments.count <= other.segments.count && other.segments.starts(with: segments)
    }

    /// True when a subscription to one path sees a change at the other: one is
    /// a prefix of the other, so the change replaces part of (or all of) what
    /// the subscriber watches, or the subscriber watches part of what changed.
    public func overlaps(_ other: RecordPath) -> Bool {
        isPrefix(of: other) || other.isPrefix(of: self)
    }

    /// The value at `self` inside `value`, where `value` is what lives at
    /// `ancestor` (a prefix of `self`); nil when absent.
    public func value(in value: JSONValue, below ancestor: RecordPath) -> JSONValue? {
        guard ancestor.isPrefix(of: self) else { return nil }
        let rest = segments.dropFirst(ancestor.segments.count)
        guard !rest.isEmpty else { return value }
        return value.value(at: RecordPath(validated: Array(rest)))
    }

    /// The path without its last segment; nil for a one-segment path.
    public var parent: RecordPath? {
        segments.count > 1 ? RecordPath(validated: Array(segments.dropLast())) : nil
    }

    /// The first `count` segments, for naming where an operation failed.
    func prefix(_ count: Int) -> RecordPath {
        RecordPath(validated: Array(segments.prefix(count)))
    }
}
