import CLibPQ

/// The parameter types this wrapper sends, each with its type OID
/// (`pg_type.oid`, fixed for built-in types: src/include/catalog/pg_type.dat).
package enum PostgresType: Sendable, Hashable, CustomStringConvertible {
    case text, int8, float8, bool, bytea
    /// Arrays, for set-based statements: `INSERT … SELECT * FROM unnest($1::int8[], $2::bytea[])`.
    case int8Array, textArray, byteaArray

    package var oid: Oid {
        switch self {
        case .bool: 16
        case .bytea: 17
        case .int8: 20
        case .text: 25
        case .float8: 701
        case .byteaArray: 1001
        case .textArray: 1009
        case .int8Array: 1016
        }
    }

    /// The element type of an array type.
    var element: PostgresType? {
        switch self {
        case .int8Array: .int8
        case .textArray: .text
        case .byteaArray: .bytea
        case .text, .int8, .float8, .bool, .bytea: nil
        }
    }

    package var description: String {
        switch self {
        case .text: "text"
        case .int8: "int8"
        case .float8: "float8"
        case .bool: "bool"
        case .bytea: "bytea"
        case .int8Array: "int8[]"
        case .textArray: "text[]"
        case .byteaArray: "bytea[]"
        }
    }
}

/// A value sent as a statement parameter or read from a row.
///
/// Parameters travel in PostgreSQL's binary format (format code 1, "Binary
/// format" under PQexecParams in the libpq manual; each type's `…send`
/// function defines its bytes): integers and floats in network byte order,
/// a bool as one byte, text and bytea as their bytes. So bytea needs no
/// escaping and a float8 arrives with every bit.
package enum PostgresValue: Sendable, Equatable {
    case null
    case text(String)
    case int8(Int64)
    case float8(Double)
    case bool(Bool)
    case bytea([UInt8])
    case int8Array([Int64])
    case textArray([String])
    case byteaArray([[UInt8]])

    /// nil for NULL, which fits any parameter type.
    package var type: PostgresType? {
        switch self {
        case .null: nil
        case .text: .text
        case .int8: .int8
        case .float8: .float8
        case .bool: .bool
        case .bytea: .bytea
        case .int8Array: .int8Array
        case .textArray: .textArray
        case .byteaArray: .byteaArray
        }
    }

    package init(_ text: String?) { self = text.map { .text($0) } ?? .null }
    package init(_ int: Int64?) { self = int.map { .int8($0) } ?? .null }
    package init(_ int: Int?) { self = int.map { .int8(Int64($0)) } ?? .null }
    package init(_ double: Double?) { self = double.map { .float8($0) } ?? .null }
    package init(_ bool: Bool?) { self = bool.map { .bool($0) } ?? .null }
    package init(bytes: [UInt8]?) { self = bytes.map { .bytea($0) } ?? .null }

    /// Appends the binary form of a non-NULL value to `out`.
    func encode(into out: inout [UInt8]) {
        switch self {
        case .null:
            break
        case .text(let text):
            out.append(contentsOf: text.utf8)
        case .int8(let int):
            Self.append(UInt64(bitPattern: int), to: &out)
        case .float8(let double):
            Self.append(double.bitPattern, to: &out)
        case .bool(let bool):
            out.append(bool ? 1 : 0)
        case .bytea(let bytes):
            out.append(contentsOf: bytes)
        case .int8Array(let values):
            Self.encodeArray(of: .int8, values.count, into: &out) { index, out in
                Self.append(UInt32(8), to: &out)
                Self.append(UInt64(bitPattern: values[index]), to: &out)
            }
        case .textArray(let values):
            Self.encodeArray(of: .text, values.count, into: &out) { index, out in
                let utf8 = values[index].utf8
                Self.append(UInt32(utf8.count), to: &out)
                out.append(contentsOf: utf8)
            }
        case .byteaArray(let values):
            Self.encodeArray(of: .bytea, values.count, into: &out) { index, out in
                Self.append(UInt32(values[index].count), to: &out)
                out.append(contentsOf: values[index])
            }
        }
    }

    /// The binary array layout `array_recv` reads (src/backend/utils/adt/arrayfuncs.c):
    /// int32 number of dimensions (0 for an empty array), int32 flags (1 if
    /// any element is NULL), the element type OID, then per dimension its
    /// length and lower bound (1), then each element as int32 length + bytes.
    private static func encodeArray(of element: PostgresType, _ count: Int, into out: inout [UInt8],
                                    _ item: (Int, inout [UInt8]) -> Void) {
        append(UInt32(count == 0 ? 0 : 1), to: &out)
        append(UInt32(0), to: &out)
        append(element.oid, to: &out)
        guard count > 0 else { return }
        append(UInt32(count), to: &out)
        append(UInt32(1), to: &out)
        for index in 0..<count { item(index, &out) }
    }

    static func append<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }
}

/// The parameters of one statement in the shape PQexecParams and
/// PQexecPrepared take: every value's bytes in one buffer, its length, its
/// format (always binary) and its type OID.
struct EncodedParameters {
    private var bytes: [UInt8] = []
    private var offsets: [Int] = []
    private(set) var lengths: [Int32] = []
    private(set) var types: [Oid] = []
    private var isNull: [Bool] = []

    /// "The maximum number of parameters … is 65535" (PQ_QUERY_PARAM_MAX_LIMIT).
    static let maximumCount = Int(PQ_QUERY_PARAM_MAX_LIMIT)

    init(_ values: [PostgresValue], operation: String) throws(PostgresError) {
        guard values.count <= Self.maximumCount else {
            throw .usage("\(values.count) parameters; a statement takes at most \(Self.maximumCount)", operation: operation)
        }
        for value in values {
            let start = bytes.count
            value.encode(into: &bytes)
            guard bytes.count - start <= Int(Int32.max) else {
                throw .usage("a parameter of \(bytes.count - start) bytes is over the 2 GiB limit", operation: operation)
            }
            offsets.append(start)
            lengths.append(Int32(bytes.count - start))
            // NULL: OID 0 lets the server infer the type from the statement.
            types.append(value.type?.oid ?? 0)
            isNull.append(value == .null)
        }
        // An empty value still needs a non-NULL pointer (NULL means SQL NULL),
        // and an empty array has no base address: keep one spare byte.
        bytes.append(0)
    }

    /// Calls `body` with the value pointers (nil for NULL), lengths and
    /// formats, valid for the call only.
    func withPointers<R>(_ body: (_ count: Int32, _ values: UnsafePointer<UnsafePointer<CChar>?>?,
                                  _ lengths: UnsafePointer<Int32>?, _ formats: UnsafePointer<Int32>?) -> R) -> R {
        bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { base in
                let pointers: [UnsafePointer<CChar>?] = offsets.indices.map { index in
                    isNull[index] ? nil : base + offsets[index]
                }
                let formats = [Int32](repeating: 1, count: offsets.count)
                return pointers.withUnsafeBufferPointer { values in
                    lengths.withUnsafeBufferPointer { lengths in
                        formats.withUnsafeBufferPointer { formats in
                            body(Int32(offsets.count), values.baseAddress, lengths.baseAddress, formats.baseAddress)
                        }
                    }
                }
            }
        }
    }
}
