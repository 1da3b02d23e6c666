/// The byte-string range of names that start with a prefix and come after a
/// given name, so that prefix scans are one index range
/// (`name >= lower AND name < upper`) instead of a LIKE that scans.
///
/// Names compare bytewise (their UTF-8), as SQLite's default BINARY
/// collation does: "Compares string data using memcmp()"
/// (sqlite.org/datatype3.html#collation).
struct NameRange: Equatable {
    /// Inclusive.
    var lower: [UInt8]
    /// Exclusive; nil means no upper bound.
    var upper: [UInt8]?

    init(prefix: String, after: String?) {
        let prefixBytes = Array(prefix.utf8)
        lower = prefixBytes
        upper = Self.upperBound(ofPrefix: prefixBytes)
        if let after {
            // The least byte string greater than `after` is `after` followed by a 0 byte.
            var successor = Array(after.utf8)
            successor.append(0)
            if lower.lexicographicallyPrecedes(successor) { lower = successor }
        }
    }

    /// The least byte string greater than every string that starts with
    /// `prefix`: drop trailing 0xFF bytes, then add one to the last byte. nil
    /// when there is none (the prefix is empty or all 0xFF).
    static func upperBound(ofPrefix prefix: [UInt8]) -> [UInt8]? {
        var bound = prefix
        while let last = bound.last {
            if last == 0xFF {
                bound.removeLast()
            } else {
                bound[bound.count - 1] = last + 1
                return bound
            }
        }
        return nil
    }

    /// Whether `name` (as UTF-8) lies in the range.
    func contains<Bytes: Sequence<UInt8>>(_ name: Bytes) -> Bool {
        guard !name.lexicographicallyPrecedes(lower) else { return false }
        guard let upper else { return true }
        return name.lexicographicallyPrecedes(upper)
    }

    /// Whether `name` is at or past the upper bound.
    func isPastEnd<Bytes: Sequence<UInt8>>(_ name: Bytes) -> Bool {
        guard let upper else { return false }
        return !name.lexicographicallyPrecedes(upper)
    }

    var isEmpty: Bool {
        guard let upper else { return false }
        return !lower.lexicographicallyPrecedes(upper)
    }
}
