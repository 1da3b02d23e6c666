/// The order key of one list entry: entries are kept in ascending order of
/// their keys, compared bytewise (as SQLite compares BLOBs,
/// sqlite.org/datatype3.html#collation: "memcmp()"), so a key never changes
/// when other entries come or go, and a new entry anywhere takes one new key.
///
/// A key is 8 bytes of integer part (big-endian, sign bit flipped, so the
/// bytes sort as the signed integers do) then an optional fraction; no key
/// ends in a 0x00 byte: keys made from integers end in 0x01. Hence
/// - an append takes `after(last)`: the integer part plus one (9 bytes for
///   the first 2^63 appends, never longer);
/// - a prepend takes `before(first)`: the integer part minus one;
/// - an insert between two entries takes `between(a, b)`, which always
///   exists because no key is another key followed by zero bytes; repeated
///   inserts at one place lengthen the key by about a byte per eight.
public struct ListKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// The key of an integer position: what `setEntries` and the migration
    /// give the entries 0, 1, 2, …
    public init(integer: Int64) {
        var bytes = [UInt8](repeating: 0, count: 9)
        let biased = UInt64(bitPattern: integer) ^ (1 << 63)
        for index in 0..<8 { bytes[index] = UInt8(truncatingIfNeeded: biased >> (56 - 8 * UInt64(index))) }
        bytes[8] = 1
        self.bytes = bytes
    }

    /// The first key of an empty list.
    public static let first = ListKey(integer: 0)

    public static func < (a: ListKey, b: ListKey) -> Bool {
        a.bytes.lexicographicallyPrecedes(b.bytes)
    }

    /// The integer part: the first 8 bytes, missing ones read as zero.
    public var integer: Int64 {
        var biased: UInt64 = 0
        for index in 0..<8 { biased = biased << 8 | UInt64(index < bytes.count ? bytes[index] : 0) }
        return Int64(bitPattern: biased ^ (1 << 63))
    }

    /// A key above this one and every key that starts with it.
    public func after() -> ListKey? {
        let (next, overflow) = integer.addingReportingOverflow(1)
        return overflow ? nil : ListKey(integer: next)
    }

    /// A key below this one. The integer part padded with zeros is at
    /// least the key's first bytes, and minus one it borrows from a byte
    /// inside the key (its last byte is not zero), so it sorts below.
    public func before() -> ListKey? {
        let (previous, overflow) = integer.subtractingReportingOverflow(1)
        return overflow ? nil : ListKey(integer: previous)
    }

    /// A key strictly between `a` and `b` (`a < b`): the bytes they share,
    /// then the middle of the first pair of digits that differ by two or
    /// more, reading past the end of `a` as zeros and, once the result is
    /// below `b` at some digit, `b` as 256s.
    public static func between(_ a: ListKey, _ b: ListKey) -> ListKey {
        precondition(a < b, "between needs a < b")
        var result: [UInt8] = []
        var bounded = true
        var index = 0
        while true {
            let low = index < a.bytes.count ? Int(a.bytes[index]) : 0
            // b cannot end while the result is still equal to it: that would make b <= a.
            let high = bounded ? Int(b.bytes[index]) : 256
            if high - low > 1 {
                result.append(UInt8((low + high) / 2))
                return ListKey(bytes: result)
            }
            result.append(UInt8(low))
            if high != low { bounded = false }
            index += 1
        }
    }

    /// Hex, for cursors and logs.
    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Parses `description`; nil for anything else (odd length, a
    /// non-hex digit, empty, longer than 1 KiB, or a key no list could hold:
    /// one ending in a zero byte).
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard !utf8.isEmpty, utf8.count % 2 == 0, utf8.count <= 2048 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        guard bytes.last != 0 else { return nil }
        self.bytes = bytes
    }
}

/// One entry of a list with its order key: what the engine reads and the
/// store keeps (a row of `list_entries`).
public struct ListRow: Sendable, Equatable {
    public var key: ListKey
    public var entry: String

    public init(key: ListKey, entry: String) {
        self.key = key
        self.entry = entry
    }
}

extension ListKey {
    /// The first index of `elements` (ascending by `key`) whose key is not
    /// below `key`: a binary search.
    public static func firstIndex<Element>(in elements: [Element], notBelow key: ListKey,
                                           by keyOf: (Element) -> ListKey) -> Int {
        var low = 0, high = elements.count
        while low < high {
            let middle = (low + high) / 2
            if keyOf(elements[middle]) < key { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
