/// Builds one JSON object straight into bytes, members in the order written.
///
/// Server messages are built this way rather than as `JSONValue`s so a record
/// that is already serialized (its stored bytes) is copied in, not walked
/// again: a change push is the record's bytes plus a few fixed members.
public struct MessageWriter {
    public private(set) var bytes: [UInt8]
    private var needsComma = false

    public init(capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(UInt8(ascii: "{"))
    }

    private mutating func key(_ name: StaticString) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        needsComma = true
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func string(_ name: StaticString, _ value: String) {
        key(name)
        JSONValue.string(value).serialize(into: &bytes)
    }

    public mutating func int(_ name: StaticString, _ value: Int64) {
        key(name)
        JSONNumber(value).serialize(into: &bytes)
    }

    public mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: value ? Array("true".utf8) : Array("false".utf8))
    }

    public mutating func value(_ name: StaticString, _ value: JSONValue) {
        key(name)
        value.serialize(into: &bytes)
    }

    /// A member whose value is already serialized JSON.
    public mutating func raw(_ name: StaticString, _ json: [UInt8]) {
        key(name)
        bytes.append(contentsOf: json)
    }

    /// A member whose value is an array of already serialized JSON values.
    public mutating func rawArray(_ name: StaticString, _ elements: [[UInt8]]) {
        key(name)
        bytes.append(UInt8(ascii: "["))
        for (index, element) in elements.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: element)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// `null` as the value of `name`.
    public mutating func null(_ name: StaticString) {
        key(name)
        bytes.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
    }

    /// Every member of `object`, in its order (for details and reply fields).
    public mutating func members(of object: JSONObject) {
        for member in object {
            if needsComma { bytes.append(UInt8(ascii: ",")) }
            needsComma = true
            JSONValue.string(member.key).serialize(into: &bytes)
            bytes.append(UInt8(ascii: ":"))
            member.value.serialize(into: &bytes)
        }
    }

    public consuming func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}
