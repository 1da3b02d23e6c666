/// Entry points to `JSONParser`.
extension JSONValue {
    /// Parses exactly one JSON text (RFC 8259 §2), strictly; see `JSONParser`
    /// for what is rejected and `JSONLimits` for the bounds.
    public static func parse(
        _ bytes: UnsafeRawBufferPointer, limits: JSONLimits = JSONLimits()
    ) throws(JSONError) -> JSONValue {
        var parser = JSONParser(bytes: bytes, limits: limits)
        return try parser.parseDocument()
    }

    public static func parse(_ bytes: [UInt8], limits: JSONLimits = JSONLimits()) throws(JSONError) -> JSONValue {
        // `withUnsafeBytes` rethrows untyped errors, so the typed error travels in a Result.
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(JSONError) -> JSONValue in try parse(raw, limits: limits) }
        }
        return try result.get()
    }

    public static func parse(_ text: String, limits: JSONLimits = JSONLimits()) throws(JSONError) -> JSONValue {
        var text = text
        let result = text.withUTF8 { utf8 in
            Result { () throws(JSONError) -> JSONValue in try parse(UnsafeRawBufferPointer(utf8), limits: limits) }
        }
        return try result.get()
    }
}
