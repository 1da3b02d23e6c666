/// A strict RFC 8259 parser over one complete JSON text.
///
/// The sync protocol's messages arrive whole (one WebSocket message is one
/// JSON text), so this is a one-shot parser over a buffer rather than an
/// incremental one: the framing layer already did the incremental work.
///
/// Strictness is a feature here: a hub that accepts `[1,]` or a duplicate key
/// lets two replicas disagree about what a peer sent. The grammar is RFC 8259
/// §2–§7 exactly; in addition duplicate member names are rejected (§4 only
/// says they "SHOULD be unique") and input must be well-formed UTF-8 (§8.1:
/// "JSON text exchanged between systems that are not part of a closed
/// ecosystem MUST be encoded using UTF-8").
///
/// The parser is iterative: open containers live on explicit stacks, so
/// nesting depth costs heap memory bounded by `JSONLimits.maxDepth`, never
/// thread stack. Values of all open containers share one `values` stack and
/// are moved into an array or object when the container closes, so building
/// a container costs one allocation, not one per element.
struct JSONParser {
    let bytes: UnsafeRawBufferPointer
    let limits: JSONLimits
    /// Offset of the next byte to read.
    var position = 0
    /// Decoded bytes of a string that contains escapes; kept across strings
    /// so only the first escaped string of a parse allocates.
    var scratch: [UInt8] = []
    /// Finished values of every open container, innermost container's last.
    var values: [JSONValue] = []
    /// Member names (and the offset of their opening quote) of every open object.
    var keys: [(name: String, offset: Int)] = []
    /// Open containers, innermost last.
    var frames: [Frame] = []

    struct Frame {
        var isObject: Bool
        /// Where this container's values begin in `values`.
        var valueStart: Int
        /// Where this object's names begin in `keys`.
        var keyStart: Int
    }

    init(bytes: UnsafeRawBufferPointer, limits: JSONLimits) {
        self.bytes = bytes
        self.limits = limits
    }

    /// RFC 8259 §2: `JSON-text = ws value ws`, exactly one value.
    mutating func parseDocument() throws(JSONError) -> JSONValue {
        guard bytes.count <= limits.maxBytes else {
            throw JSONError(
                kind: .inputLimitExceeded, offset: limits.maxBytes,
                message: "input of \(bytes.count) bytes is larger than the limit of \(limits.maxBytes) bytes")
        }
        let value = try parseValue()
        skipWhitespace()
        guard position == bytes.count else {
            throw failure(.trailingContent, "expected the end of input after the JSON value, found \(describeNext())")
        }
        return value
    }

    /// Parses one value, descending into containers without recursion.
    mutating func parseValue() throws(JSONError) -> JSONValue {
        descend: while true {
            skipWhitespace()
            guard position < bytes.count else {
                throw failure(.unexpectedEnd, "expected a JSON value, but the input ended")
            }
            let valueOffset = position
            var value: JSONValue
            switch bytes[position] {
            case ASCII.openBrace:
                try openContainer()
                position += 1
                skipWhitespace()
                if position < bytes.count, bytes[position] == ASCII.closeBrace {
                    position += 1
                    value = .object(JSONObject())
                } else {
                    frames.append(Frame(isObject: true, valueStart: values.count, keyStart: keys.count))
                    try parseMemberName()
                    continue descend
                }
            case ASCII.openBracket:
                try openContainer()
                position += 1
                skipWhitespace()
                if position < bytes.count, bytes[position] == ASCII.closeBracket {
                    position += 1
                    value = .array([])
                } else {
                    frames.append(Frame(isObject: false, valueStart: values.count, keyStart: keys.count))
                    continue descend
                }
            case ASCII.quote:
                value = .string(try parseString())
            case ASCII.minus, ASCII.zero...ASCII.nine:
                value = .number(try parseNumber())
            case ASCII.t:
                try expectLiteral("true")
                value = .bool(true)
            case ASCII.f:
                try expectLiteral("false")
                value = .bool(false)
            case ASCII.n:
                try expectLiteral("null")
                value = .null
            default:
                throw failure(
                    .unexpectedByte,
                    "expected a JSON value (object, array, string, number, true, false or null), found \(describeNext())")
            }

            // Ascend: hand the value to its container, closing containers as they end.
            while let frame = frames.last {
                if frame.isObject {
                    guard values.count - frame.valueStart < limits.maxObjectMembers else {
                        throw JSONError(
                            kind: .objectLimitExceeded, offset: keys[keys.count - 1].offset,
                            message: "object has more than \(limits.maxObjectMembers) members at byte \(keys[keys.count - 1].offset)")
                    }
                    values.append(value)
                    skipWhitespace()
                    guard position < bytes.count else {
                        throw failure(.unexpectedEnd, "expected ',' or '}' after object member, but the input ended")
                    }
                    switch bytes[position] {
                    case ASCII.comma:
                        position += 1
                        skipWhitespace()
                        try parseMemberName()
                        continue descend
                    case ASCII.closeBrace:
                        position += 1
                        frames.removeLast()
                        value = .object(try closeObject(frame))
                    default:
                        throw failure(.unexpectedByte, "expected ',' or '}' after object member, found \(describeNext())")
                    }
                } else {
                    guard values.count - frame.valueStart < limits.maxArrayElements else {
                        throw JSONError(
                            kind: .arrayLimitExceeded, offset: valueOffset,
                            message: "array has more than \(limits.maxArrayElements) elements at byte \(valueOffset)")
                    }
                    values.append(value)
                    skipWhitespace()
                    guard position < bytes.count else {
                        throw failure(.unexpectedEnd, "expected ',' or ']' after array element, but the input ended")
                    }
                    switch bytes[position] {
                    case ASCII.comma:
                        position += 1
                        continue descend
                    case ASCII.closeBracket:
                        position += 1
                        frames.removeLast()
                        value = .array(Array(values[frame.valueStart...]))
                        values.removeSubrange(frame.valueStart...)
                    default:
                        throw failure(.unexpectedByte, "expected ',' or ']' after array element, found \(describeNext())")
                    }
                }
            }
            return value
        }
    }

    /// Called on the byte that opens a container.
    ///
    /// Opening the outermost container also sizes the stacks once, so a
    /// small message does not pay for growing them element by element.
    private mutating func openContainer() throws(JSONError) {
        guard frames.count < limits.maxDepth else {
            throw failure(.depthLimitExceeded, "nesting deeper than \(limits.maxDepth) levels")
        }
        if frames.isEmpty, values.capacity == 0 {
            frames.reserveCapacity(8)
            values.reserveCapacity(16)
            keys.reserveCapacity(16)
        }
    }

    /// RFC 8259 §4: `member = string name-separator value`. Reads the name and the ':'.
    private mutating func parseMemberName() throws(JSONError) {
        guard position < bytes.count else {
            throw failure(.unexpectedEnd, "expected an object member name in double quotes, but the input ended")
        }
        guard bytes[position] == ASCII.quote else {
            throw failure(.unexpectedByte, "expected an object member name in double quotes, found \(describeNext())")
        }
        let offset = position
        let name = try parseString()
        keys.append((name, offset))
        skipWhitespace()
        guard position < bytes.count else {
            throw failure(.unexpectedEnd, "expected ':' after object member name, but the input ended")
        }
        guard bytes[position] == ASCII.colon else {
            throw failure(.unexpectedByte, "expected ':' after object member name, found \(describeNext())")
        }
        position += 1
    }

    /// Moves the open object's members off the stacks into a sorted `JSONObject`.
    ///
    /// Input written by our own serializer is already sorted, so the common
    /// case is one linear check and no sort. A duplicate is reported at its
    /// second occurrence in the text, whatever the sort did.
    private mutating func closeObject(_ frame: Frame) throws(JSONError) -> JSONObject {
        let count = values.count - frame.valueStart
        var members: [JSONObject.Element] = []
        members.reserveCapacity(count)
        var ascending = true
        for i in 0..<count {
            let name = keys[frame.keyStart + i].name
            if ascending, let last = members.last, JSONObject.compare(last.key, name) >= 0 {
                ascending = false
            }
            members.append((name, values[frame.valueStart + i]))
        }
        if !ascending {
            members.sort { JSONObject.compare($0.key, $1.key) < 0 }
            for i in members.indices.dropFirst() where JSONObject.compare(members[i - 1].key, members[i].key) == 0 {
                throw duplicateKeyError(frame)
            }
        }
        values.removeSubrange(frame.valueStart...)
        keys.removeSubrange(frame.keyStart...)
        return JSONObject(sortedUniqueMembers: members)
    }

    /// The error path only: finds the first name, in text order, seen before.
    private func duplicateKeyError(_ frame: Frame) -> JSONError {
        var seen = Set<[UInt8]>()
        for (name, offset) in keys[frame.keyStart...] where !seen.insert(Array(name.utf8)).inserted {
            let shown = name.utf8.count > 64 ? String(name.prefix(32)) + "…" : name
            return JSONError(
                kind: .duplicateKey, offset: offset,
                message: "duplicate key \(JSONValue.string(shown).serializedString) at byte \(offset)")
        }
        // Unreachable when called after the sort found equal neighbours; still a sane error.
        return JSONError(kind: .duplicateKey, offset: position, message: "duplicate key at byte \(position)")
    }

    /// RFC 8259 §3: the literal names must be lowercase.
    private mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let expected = UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for byte in expected {
            guard position < bytes.count else {
                throw failure(.unexpectedEnd, "expected '\(literal)', but the input ended")
            }
            guard bytes[position] == byte else {
                throw failure(.unexpectedByte, "expected '\(literal)', found \(describeNext())")
            }
            position += 1
        }
    }

    /// RFC 8259 §2: `ws = *( %x20 / %x09 / %x0A / %x0D )`.
    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case ASCII.space, ASCII.tab, ASCII.lineFeed, ASCII.carriageReturn: position += 1
            default: return
            }
        }
    }

    // MARK: Errors

    /// An error at the current position; `what` is completed with " at byte N".
    func failure(_ kind: JSONError.Kind, _ what: String) -> JSONError {
        failure(kind, what, at: position)
    }

    func failure(_ kind: JSONError.Kind, _ what: String, at offset: Int) -> JSONError {
        JSONError(kind: kind, offset: offset, message: "\(what) at byte \(offset)")
    }

    /// The byte at `position` as a message shows it: `'x'` when printable, else its hex value.
    func describeNext() -> String {
        guard position < bytes.count else { return "end of input" }
        return Self.describe(bytes[position])
    }

    static func describe(_ byte: UInt8) -> String {
        if byte >= 0x21, byte <= 0x7E { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }
}

/// The ASCII bytes the grammar names.
enum ASCII {
    static let tab: UInt8 = 0x09
    static let lineFeed: UInt8 = 0x0A
    static let carriageReturn: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let quote = UInt8(ascii: "\"")
    static let plus = UInt8(ascii: "+")
    static let comma = UInt8(ascii: ",")
    static let minus = UInt8(ascii: "-")
    static let dot = UInt8(ascii: ".")
    static let slash = UInt8(ascii: "/")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
    static let colon = UInt8(ascii: ":")
    static let upperE = UInt8(ascii: "E")
    static let openBracket = UInt8(ascii: "[")
    static let backslash = UInt8(ascii: "\\")
    static let closeBracket = UInt8(ascii: "]")
    static let b = UInt8(ascii: "b")
    static let e = UInt8(ascii: "e")
    static let f = UInt8(ascii: "f")
    static let n = UInt8(ascii: "n")
    static let r = UInt8(ascii: "r")
    static let t = UInt8(ascii: "t")
    static let u = UInt8(ascii: "u")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
}
