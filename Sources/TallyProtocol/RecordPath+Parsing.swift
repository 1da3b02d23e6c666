/// The path grammar:
///
///     path    = first *( "." key / index )
///     first   = key / index
///     key     = 1*( any scalar except ".", "[", "]" and controls (Cc) )
///     index   = "[" ( "0" / %x31-39 *DIGIT ) "]"      ; value ≤ RecordPath.maxIndex
///
/// plus limits: at most `maxBytes` UTF-8 bytes and `maxSegments` segments.
extension RecordPath {
    /// Parses `text`, rejecting anything that would not render back to itself.
    public init(parsing text: String) throws(RecordPathError) {
        var parser = RecordPathParser(text)
        self.init(validated: try parser.parse())
    }
}

/// One pass over the Unicode scalars of a path text. Scalars, not Characters:
/// `".\u{301}"` is one Character but must still split at the dot.
struct RecordPathParser {
    private let text: String
    private let scalars: [Unicode.Scalar]
    private var position = 0
    private var segments: [RecordPath.Segment] = []

    init(_ text: String) {
        self.text = text
        scalars = Array(text.unicodeScalars)
    }

    mutating func parse() throws(RecordPathError) -> [RecordPath.Segment] {
        try checkLength()
        guard !scalars.isEmpty else { throw error(.emptyPath, "empty path", at: 0) }
        if scalars[0] == "[" { try parseIndex() } else { try parseKey() }
        while position < scalars.count {
            switch scalars[position] {
            case ".":
                position += 1
                try parseKey()
            case "[":
                try parseIndex()
            case "]":
                throw error(.unexpectedCharacter, "unexpected ']' outside an index", at: position)
            default:
                // Only reachable after `]`: a key scalar would have joined the key.
                throw error(.unexpectedCharacter,
                            "expected '.' or '[' after an index, found '\(scalars[position].escaped(asASCII: true))'",
                            at: position)
            }
        }
        return segments
    }

    private func checkLength() throws(RecordPathError) {
        var bytes = 0
        for (offset, scalar) in scalars.enumerated() {
            bytes += UTF8.width(scalar)
            if bytes > RecordPath.maxBytes {
                throw error(.pathTooLong,
                            "path is \(text.utf8.count) bytes, over the limit of \(RecordPath.maxBytes)",
                            at: offset)
            }
        }
    }

    private mutating func append(_ segment: RecordPath.Segment, startingAt start: Int) throws(RecordPathError) {
        guard segments.count < RecordPath.maxSegments else {
            throw error(.tooManySegments, "more than \(RecordPath.maxSegments) segments", at: start)
        }
        segments.append(segment)
    }

    private mutating func parseKey() throws(RecordPathError) {
        let start = position
        while position < scalars.count {
            let scalar = scalars[position]
            if scalar == "." || scalar == "[" || scalar == "]" { break }
            if scalar.properties.generalCategory == .control {
                throw error(.controlCharacter,
                            "control character \(scalar.escaped(asASCII: true)) in key", at: position)
            }
            position += 1
        }
        guard position > start else {
            if position < scalars.count, scalars[position] == "]" {
                throw error(.unexpectedCharacter, "unexpected ']' outside an index", at: position)
            }
            throw error(.emptyKey, "empty key", at: position)
        }
        try append(.key(String(String.UnicodeScalarView(scalars[start..<position]))), startingAt: start)
    }

    /// At `[`: reads a canonical decimal and the closing `]`.
    private mutating func parseIndex() throws(RecordPathError) {
        let start = position
        position += 1
        let digitsStart = position
        var value = 0
        while position < scalars.count, let digit = Self.digit(scalars[position]) {
            if position > digitsStart, value == 0 {
                throw error(.invalidIndex, "index with a leading zero", at: digitsStart)
            }
            value = value * 10 + digit
            if value > RecordPath.maxIndex {
                throw error(.indexTooLarge, "index above \(RecordPath.maxIndex)", at: digitsStart)
            }
            position += 1
        }
        guard position < scalars.count else {
            throw error(.invalidIndex,
                        position == digitsStart ? "unclosed index, expected a digit" : "unclosed index, expected ']'",
                        at: position)
        }
        let scalar = scalars[position]
        guard scalar == "]" else {
            throw error(.invalidIndex,
                        "index must be a decimal without sign, found '\(scalar.escaped(asASCII: true))'",
                        at: position)
        }
        guard position > digitsStart else { throw error(.invalidIndex, "empty index", at: position) }
        position += 1
        try append(.index(value), startingAt: start)
    }

    private static func digit(_ scalar: Unicode.Scalar) -> Int? {
        guard scalar.value >= 0x30, scalar.value <= 0x39 else { return nil }
        return Int(scalar.value - 0x30)
    }

    /// "`problem` at offset N in "`text`"", with long texts shortened.
    private func error(_ kind: RecordPathError.Kind, _ problem: String, at offset: Int) -> RecordPathError {
        let shown = scalars.count > 80
            ? String(String.UnicodeScalarView(scalars.prefix(64))) + "…"
            : text
        return RecordPathError(kind: kind, offset: offset,
                               message: "\(problem) at offset \(offset) in \(shown.debugDescription)")
    }
}
