/// A name that compares and hashes by its UTF-8 bytes, as SQLite's BINARY
/// collation does.
///
/// Swift's `String` equality is canonical equivalence: "é" (U+00E9) and
/// "e\u{301}" are equal as Strings, so as dictionary keys they would be one
/// record, while SQLite keeps two. MemoryStore keys its tables by `ByteName`
/// so that both backends agree on what is the same name and on the order.
struct ByteName: Hashable, Comparable, Sendable {
    let string: String

    init(_ string: String) {
        self.string = string
    }

    static func == (a: ByteName, b: ByteName) -> Bool {
        a.string.utf8.elementsEqual(b.string.utf8)
    }

    static func < (a: ByteName, b: ByteName) -> Bool {
        a.string.utf8.lexicographicallyPrecedes(b.string.utf8)
    }

    func hash(into hasher: inout Hasher) {
        let hashed: Void? = string.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in string.utf8 { hasher.combine(byte) }
        }
    }
}

/// Names kept sorted bytewise, for prefix scans over a dictionary's keys.
/// Insertion is O(n) (a memmove); fine for the in-memory backend's sizes.
struct SortedNames {
    private(set) var names: [ByteName] = []

    /// The index of the first name not below `bytes`.
    func firstIndex(notBelow bytes: [UInt8]) -> Int {
        var low = 0
        var high = names.count
        while low < high {
            let middle = (low + high) / 2
            if names[middle].string.utf8.lexicographicallyPrecedes(bytes) {
                low = middle + 1
            } else {
                high = middle
            }
        }
        return low
    }

    mutating func insert(_ name: ByteName) {
        let index = firstIndex(notBelow: Array(name.string.utf8))
        if index < names.count && names[index] == name { return }
        names.insert(name, at: index)
    }

    mutating func remove(_ name: ByteName) {
        let index = firstIndex(notBelow: Array(name.string.utf8))
        if index < names.count && names[index] == name { names.remove(at: index) }
    }
}
