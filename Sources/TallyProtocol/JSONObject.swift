/// A JSON object: unique member names, kept sorted by the UTF-8 bytes of the name.
///
/// RFC 8259 §4 says "The names within an object SHOULD be unique" and that
/// objects with duplicates behave unpredictably across implementations; a sync
/// hub needs every replica to hold the same state, so names here are unique
/// and the parser rejects duplicates.
///
/// Order is the byte order of the UTF-8 encoding, not Swift's `String` order,
/// for two reasons: Swift compares strings by canonical equivalence (so
/// `"é"` and `"e\u{301}"` would be one key), and a byte order is what every
/// other implementation can reproduce. Names are therefore compared by bytes
/// everywhere in this type.
///
/// Storage is one sorted array with binary search: lookups are O(log n),
/// inserts O(n), which beats hashing for the few-member objects a sync hub
/// moves, and iteration and serialization need no sort.
public struct JSONObject: Sendable, Hashable, RandomAccessCollection {
    public typealias Element = (key: String, value: JSONValue)

    /// Sorted by `JSONObject.compare`, no two keys equal.
    @usableFromInline
    private(set) var members: [Element]

    public init() { members = [] }

    /// Builds from pairs; a later pair with the same name replaces an earlier
    /// one (as assigning through the subscript would).
    public init(_ pairs: some Sequence<(String, JSONValue)>) {
        members = []
        for (key, value) in pairs { self[key] = value }
    }

    public init(_ dictionary: [String: JSONValue]) {
        self.init(dictionary.lazy.map { ($0.key, $0.value) })
    }

    /// For the parser: `sorted` must already be sorted and free of duplicates.
    init(sortedUniqueMembers sorted: [Element]) { members = sorted }

    // MARK: Collection

    public var startIndex: Int { members.startIndex }
    public var endIndex: Int { members.endIndex }
    public subscript(position: Int) -> Element { members[position] }

    // MARK: Dictionary-like API

    /// Member names in byte order.
    public var keys: [String] { members.map(\.key) }

    /// Member values, in the order of their names.
    public var values: [JSONValue] { members.map(\.value) }

    /// The value for `key`, or nil; assigning nil removes the member.
    public subscript(key: String) -> JSONValue? {
        get {
            switch search(key) {
            case .found(let index): return members[index].value
            case .insertAt: return nil
            }
        }
        set {
            switch (search(key), newValue) {
            case (.found(let index), let value?): members[index].value = value
            case (.found(let index), nil): members.remove(at: index)
            case (.insertAt(let index), let value?): members.insert((key, value), at: index)
            case (.insertAt, nil): break
            }
        }
    }

    /// Removes the member named `key`, returning its value if it was there.
    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard case .found(let index) = search(key) else { return nil }
        return members.remove(at: index).value
    }

    // MARK: Equatable, Hashable

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.members.count == rhs.members.count else { return false }
        for (a, b) in zip(lhs.members, rhs.members) {
            guard compare(a.key, b.key) == 0, a.value == b.value else { return false }
        }
        return true
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(members.count)
        for member in members {
            JSONValue.hashBytes(of: member.key, into: &hasher)
            hasher.combine(member.value)
        }
    }

    // MARK: Byte order

    enum SearchResult { case found(Int), insertAt(Int) }

    func search(_ key: String) -> SearchResult {
        var low = 0
        var high = members.count
        while low < high {
            let mid = (low &+ high) >> 1
            let order = Self.compare(members[mid].key, key)
            if order == 0 { return .found(mid) }
            if order < 0 { low = mid + 1 } else { high = mid }
        }
        return .insertAt(low)
    }

    /// Three-way comparison of the UTF-8 bytes of two strings (negative, 0, positive).
    static func compare(_ a: String, _ b: String) -> Int {
        let fast = a.utf8.withContiguousStorageIfAvailable { a in
            b.utf8.withContiguousStorageIfAvailable { b in compareBytes(a, b) }
        }
        if let fast, let result = fast { return result }
        var left = a.utf8.makeIterator()
        var right = b.utf8.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let x?, let y?): if x != y { return x < y ? -1 : 1 }
            }
        }
    }

    static func compareBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        let common = Swift.min(a.count, b.count)
        var i = 0
        while i < common {
            let x = a[i], y = b[i]
            if x != y { return x < y ? -1 : 1 }
            i += 1
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}

extension JSONObject: ExpressibleByDictionaryLiteral {
    /// A repeated name keeps the last value, as with the pairs initializer.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(elements)
    }
}

extension JSONObject: CustomStringConvertible {
    public var description: String { JSONValue.object(self).serializedString }
}
