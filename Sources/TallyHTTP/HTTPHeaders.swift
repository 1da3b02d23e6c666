/// Ordered header fields with case-insensitive lookup.
///
/// Order is kept because it carries meaning for repeated fields (RFC 9110
/// §5.3: "the order in which field lines with the same name are received is
/// significant"), and names keep the case they were written in so a response
/// goes out as the handler spelled it. Lookups compare names ignoring ASCII
/// case (RFC 9110 §5.1). A plain array beats a dictionary here: requests
/// carry a dozen fields, and a linear scan over them allocates nothing.
public struct HTTPHeaders: Sendable, Equatable {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(_ fields: [(String, String)]) {
        for (name, value) in fields { add(name, value) }
    }

    /// The number of field lines.
    public var count: Int { fields.count }

    /// Reserves room for `count` field lines.
    public mutating func reserveCapacity(_ count: Int) {
        fields.reserveCapacity(count)
    }

    /// Appends a field line, keeping any earlier ones with the same name.
    public mutating func add(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    /// Replaces every field of this name with one, at the position of the
    /// first (or at the end when there was none).
    public mutating func set(_ name: String, _ value: String) {
        guard let first = fields.firstIndex(where: { ASCII.equalsIgnoringCase($0.name, name) }) else {
            fields.append((name, value))
            return
        }
        fields[first] = (name, value)
        var index = fields.index(after: first)
        while index < fields.endIndex {
            if ASCII.equalsIgnoringCase(fields[index].name, name) {
                fields.remove(at: index)
            } else {
                index += 1
            }
        }
    }

    /// Removes every field of this name.
    public mutating func remove(_ name: String) {
        fields.removeAll { ASCII.equalsIgnoringCase($0.name, name) }
    }

    /// Whether a field of this name is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { ASCII.equalsIgnoringCase($0.name, name) }
    }

    /// The first value of the field, or nil.
    public subscript(_ name: String) -> String? {
        for field in fields where ASCII.equalsIgnoringCase(field.name, name) {
            return field.value
        }
        return nil
    }

    /// Every value of the field, in order (comma-joined lists not split).
    public func values(_ name: String) -> [String] {
        fields.compactMap { ASCII.equalsIgnoringCase($0.name, name) ? $0.value : nil }
    }

    /// Whether a comma-separated token list field (Connection, Upgrade) holds
    /// the token, compared case-insensitively.
    ///
    /// Every line of the field counts, since a recipient may combine repeated
    /// lines into one comma-separated list (RFC 9110 §5.3), and elements are
    /// trimmed of OWS (RFC 9110 §5.6.1), so `Connection: keep-alive , Upgrade`
    /// holds `upgrade`.
    public func containsToken(_ name: String, _ token: String) -> Bool {
        ASCII.withUTF8(token) { token in
            for field in fields where ASCII.equalsIgnoringCase(field.name, name) {
                let found = ASCII.withUTF8(field.value) { value in
                    ASCII.anyListElement(value) { ASCII.equalsIgnoringCase($0, token) }
                }
                if found { return true }
            }
            return false
        }
    }

    /// Equal when both hold the same field lines in the same order, names
    /// compared ignoring case and values exactly.
    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        guard a.fields.count == b.fields.count else { return false }
        for (x, y) in zip(a.fields, b.fields) {
            guard x.value == y.value, ASCII.equalsIgnoringCase(x.name, y.name) else { return false }
        }
        return true
    }
}
