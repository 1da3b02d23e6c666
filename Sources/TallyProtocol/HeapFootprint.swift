/// Estimates of the heap memory values hold, for caches that are bounded
/// by bytes rather than by a count of entries (a count says nothing when
/// one record is 200 bytes and the next 1 MiB).
///
/// The figures follow the Swift runtime's layout on 64-bit Linux and
/// glibc's allocator: an array is one heap object of a 32-byte header and
/// `capacity` elements; a string of more than 15 UTF-8 bytes keeps them in
/// a heap object with a 32-byte header and a terminating NUL (up to 15 they
/// live inside the `String` itself); and glibc rounds every request up to a
/// 16-byte multiple after adding its 8-byte size word (at least 32 bytes).
/// Shared copy-on-write storage is counted once per value that holds it, so
/// the estimate errs high, never low.
public enum HeapFootprint {
    /// What glibc's malloc takes for a request of `bytes`.
    @inlinable
    public static func allocation(_ bytes: Int) -> Int {
        max(32, (bytes + 8 + 15) & ~15)
    }

    /// The heap object of an array with room for `capacity` elements of `stride` bytes (none when empty).
    @inlinable
    public static func array(capacity: Int, stride: Int) -> Int {
        capacity == 0 ? 0 : allocation(32 + capacity * stride)
    }

    /// The heap bytes of a string: none when its UTF-8 fits inline (15 bytes).
    @inlinable
    public static func string(_ string: String) -> Int {
        let count = string.utf8.count
        return count <= 15 ? 0 : allocation(32 + count + 1)
    }

    /// The heap object of a `[UInt8]`.
    @inlinable
    public static func bytes(_ bytes: [UInt8]) -> Int { array(capacity: bytes.capacity, stride: 1) }

    /// An array of strings: its storage and each string's.
    public static func strings(_ strings: [String]) -> Int {
        var total = array(capacity: strings.capacity, stride: MemoryLayout<String>.stride)
        for string in strings { total += Self.string(string) }
        return total
    }
}

extension JSONValue {
    /// The heap bytes this value's tree holds (see `HeapFootprint`): scalars
    /// live inline, strings, arrays and objects on the heap.
    public var heapBytes: Int {
        switch self {
        case .null, .bool, .number: return 0
        case .string(let string): return HeapFootprint.string(string)
        case .array(let values):
            var total = HeapFootprint.array(capacity: values.capacity, stride: MemoryLayout<JSONValue>.stride)
            for value in values { total += value.heapBytes }
            return total
        case .object(let object): return object.heapBytes
        }
    }
}

extension JSONObject {
    /// The heap bytes of the members array, their names and their values.
    public var heapBytes: Int {
        var total = HeapFootprint.array(capacity: members.capacity, stride: MemoryLayout<Element>.stride)
        for (key, value) in members { total += HeapFootprint.string(key) + value.heapBytes }
        return total
    }
}
