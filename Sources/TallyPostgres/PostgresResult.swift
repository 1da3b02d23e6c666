import CLibPQ

/// The rows of one statement, in PostgreSQL's binary format, held as libpq
/// returned them (a `PGresult`, freed with the last reference) and decoded
/// only as a caller reads a field.
///
/// Binary results (resultFormat 1) carry bytea and text as their bytes and
/// numbers in network byte order: no hex to decode and no float printed and
/// parsed back. The types a field can be read as are the ones the store
/// needs (see `PostgresRow`); anything else — numeric, timestamps — is read
/// by casting it in SQL (`::text`, `extract(epoch …)::int8`). Confined to the
/// connection's thread like the connection itself.
package final class PostgresResult: RandomAccessCollection {
    let handle: OpaquePointer
    /// The statement, for errors ("read column 2 of insert change").
    package let operation: String

    init(handle: OpaquePointer, operation: String) {
        self.handle = handle
        self.operation = operation
    }

    deinit {
        PQclear(handle)
    }

    package var startIndex: Int { 0 }
    package var endIndex: Int { Int(PQntuples(handle)) }
    package subscript(row: Int) -> PostgresRow { PostgresRow(result: self, row: Int32(row)) }

    package var columnCount: Int { Int(PQnfields(handle)) }

    package func columnName(_ column: Int) -> String {
        PQfname(handle, Int32(column)).map { String(cString: $0) } ?? ""
    }

    /// The rows an INSERT, UPDATE, DELETE, MERGE, SELECT … changed or
    /// returned (PQcmdTuples); 0 for other commands.
    package var affectedRows: Int {
        guard let text = PQcmdTuples(handle) else { return 0 }
        return Int(String(cString: text)) ?? 0
    }

    /// The command tag: "INSERT 0 1", "COMMIT", "ROLLBACK", …
    package var commandStatus: String {
        PQcmdStatus(handle).map { String(cString: $0) } ?? ""
    }

    /// The first row, or a `.usage` error saying the statement returned none.
    package func firstRow() throws(PostgresError) -> PostgresRow {
        guard let row = first else { throw .usage("returned no row", operation: operation) }
        return row
    }
}

/// One row of a `PostgresResult`. Each read checks the column's type and
/// NULL and throws a `.usage` error naming the column if it does not fit.
package struct PostgresRow {
    package let result: PostgresResult
    let row: Int32

    package func isNull(_ column: Int) -> Bool {
        PQgetisnull(result.handle, row, Int32(column)) == 1
    }

    package func int64(_ column: Int) throws(PostgresError) -> Int64 { try get(column) }
    package func double(_ column: Int) throws(PostgresError) -> Double { try get(column) }
    package func bool(_ column: Int) throws(PostgresError) -> Bool { try get(column) }
    package func text(_ column: Int) throws(PostgresError) -> String { try get(column) }
    package func bytes(_ column: Int) throws(PostgresError) -> [UInt8] { try get(column) }

    /// The field as `T`; an Optional `T` reads NULL as nil.
    package func get<T: PostgresDecodable>(_ column: Int, as _: T.Type = T.self) throws(PostgresError) -> T {
        try T.decode(field(column))
    }

    /// The field as whichever `PostgresValue` its type maps to.
    package func value(_ column: Int) throws(PostgresError) -> PostgresValue {
        let field = try field(column)
        if field.isNull { return .null }
        switch field.type {
        case PostgresOID.bool: return .bool(try Bool.decode(field))
        case PostgresOID.int2, PostgresOID.int4, PostgresOID.int8, PostgresOID.oid: return .int8(try Int64.decode(field))
        case PostgresOID.float4, PostgresOID.float8: return .float8(try Double.decode(field))
        case PostgresType.bytea.oid: return .bytea(try [UInt8].decode(field))
        case PostgresType.int8Array.oid: return .int8Array(try field.array(of: .int8).map { element throws(PostgresError) in
            try Int64.decode(element)
        })
        case PostgresType.textArray.oid: return .textArray(try field.array(of: .text).map { element throws(PostgresError) in
            try String.decode(element)
        })
        case PostgresType.byteaArray.oid: return .byteaArray(try field.array(of: .bytea).map { element throws(PostgresError) in
            try [UInt8].decode(element)
        })
        default:
            if PostgresOID.textual.contains(field.type) { return .text(try String.decode(field)) }
            throw field.mismatch("a value")
        }
    }

    private func field(_ column: Int) throws(PostgresError) -> PostgresField {
        let count = result.columnCount
        guard column >= 0, column < count else {
            throw .usage("column \(column) does not exist (the row has \(count))", operation: result.operation)
        }
        let index = Int32(column)
        let isNull = PQgetisnull(result.handle, row, index) == 1
        let length = Int(PQgetlength(result.handle, row, index))
        let pointer = PQgetvalue(result.handle, row, index).map { UnsafeRawPointer($0) }
        return PostgresField(bytes: UnsafeRawBufferPointer(start: isNull ? nil : pointer, count: isNull ? 0 : length),
                             isNull: isNull, type: PQftype(result.handle, index), column: column, result: result)
    }
}

/// Type OIDs read from rows beyond the ones `PostgresType` sends.
enum PostgresOID {
    static let bool: Oid = 16
    static let int8: Oid = 20
    static let int2: Oid = 21
    static let int4: Oid = 23
    static let oid: Oid = 26
    static let float4: Oid = 700
    static let float8: Oid = 701
    /// Types whose binary form is their text in the client encoding (UTF-8):
    /// char, name, text, json, unknown, bpchar, varchar.
    static let textual: Set<Oid> = [18, 19, 25, 114, 705, 1042, 1043]
}

/// One field's bytes as libpq holds them, valid while its result lives.
package struct PostgresField {
    let bytes: UnsafeRawBufferPointer
    package let isNull: Bool
    package let type: Oid
    let column: Int
    /// Keeps `bytes` alive, and names the column and statement in errors.
    let result: PostgresResult

    private var operation: String { result.operation }

    /// "column 2 (seq)", built only for an error.
    private var columnName: String { "column \(column) (\(result.columnName(column)))" }

    func mismatch(_ wanted: String) -> PostgresError {
        .usage("\(columnName) is of type OID \(type), which cannot be read as \(wanted) (cast it in SQL)", operation: operation)
    }

    func null(_ wanted: String) -> PostgresError {
        .usage("\(columnName) is NULL, not \(wanted) (read it as an Optional)", operation: operation)
    }

    func bigEndian<T: FixedWidthInteger>(_: T.Type) throws(PostgresError) -> T {
        guard bytes.count == MemoryLayout<T>.size else {
            throw .usage("\(columnName) has \(bytes.count) bytes, not \(MemoryLayout<T>.size)", operation: operation)
        }
        var value = T.zero
        withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: bytes) }
        return T(bigEndian: value)
    }

    /// The elements of a one-dimensional binary array (see
    /// `PostgresValue.encodeArray` for the layout) without NULLs.
    func array(of element: PostgresType) throws(PostgresError) -> [PostgresField] {
        var reader = ByteReader(bytes: bytes)
        func malformed() -> PostgresError { .usage("\(columnName) is not a well-formed array", operation: operation) }
        guard let dimensions = reader.uint32(), let flags = reader.uint32(), let elementType = reader.uint32() else {
            throw malformed()
        }
        guard elementType == element.oid else { throw mismatch("\(element)[]") }
        guard dimensions <= 1 else { throw .usage("\(columnName) has \(dimensions) dimensions, not 1", operation: operation) }
        guard flags == 0 else { throw .usage("\(columnName) holds NULL elements", operation: operation) }
        guard dimensions == 1 else { return [] }
        guard let count = reader.uint32(), reader.uint32() != nil else { throw malformed() }
        var elements: [PostgresField] = []
        elements.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let length = reader.uint32(), let slice = reader.take(Int(length)) else { throw malformed() }
            elements.append(PostgresField(bytes: slice, isNull: false, type: element.oid, column: column, result: result))
        }
        return elements
    }
}

private struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    mutating func uint32() -> UInt32? {
        guard let slice = take(4) else { return nil }
        return slice.reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func take(_ count: Int) -> UnsafeRawBufferPointer? {
        guard count >= 0, count <= bytes.count - offset else { return nil }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }
}

/// A Swift type a field can be read as.
package protocol PostgresDecodable {
    static func decode(_ field: PostgresField) throws(PostgresError) -> Self
}

extension Int64: PostgresDecodable {
    /// int2, int4, int8 and oid, widened.
    package static func decode(_ field: PostgresField) throws(PostgresError) -> Int64 {
        guard !field.isNull else { throw field.null("an integer") }
        switch field.type {
        case PostgresOID.int8: return Int64(bitPattern: try field.bigEndian(UInt64.self))
        case PostgresOID.int4: return Int64(Int32(bitPattern: try field.bigEndian(UInt32.self)))
        case PostgresOID.int2: return Int64(Int16(bitPattern: try field.bigEndian(UInt16.self)))
        case PostgresOID.oid: return Int64(try field.bigEndian(UInt32.self))
        default: throw field.mismatch("an integer")
        }
    }
}

extension Double: PostgresDecodable {
    /// float8, and float4 widened.
    package static func decode(_ field: PostgresField) throws(PostgresError) -> Double {
        guard !field.isNull else { throw field.null("a float") }
        switch field.type {
        case PostgresOID.float8: return Double(bitPattern: try field.bigEndian(UInt64.self))
        case PostgresOID.float4: return Double(Float(bitPattern: try field.bigEndian(UInt32.self)))
        default: throw field.mismatch("a float")
        }
    }
}

extension Bool: PostgresDecodable {
    package static func decode(_ field: PostgresField) throws(PostgresError) -> Bool {
        guard !field.isNull else { throw field.null("a bool") }
        guard field.type == PostgresOID.bool, field.bytes.count == 1 else { throw field.mismatch("a bool") }
        return field.bytes[0] != 0
    }
}

extension String: PostgresDecodable {
    /// text, varchar, char, name, json and unknown: their UTF-8 bytes.
    package static func decode(_ field: PostgresField) throws(PostgresError) -> String {
        guard !field.isNull else { throw field.null("text") }
        guard PostgresOID.textual.contains(field.type) else { throw field.mismatch("text") }
        return String(decoding: field.bytes, as: UTF8.self)
    }
}

extension Array: PostgresDecodable where Element == UInt8 {
    /// bytea, or a textual type's UTF-8 bytes.
    package static func decode(_ field: PostgresField) throws(PostgresError) -> [UInt8] {
        guard !field.isNull else { throw field.null("bytes") }
        guard field.type == PostgresType.bytea.oid || PostgresOID.textual.contains(field.type) else {
            throw field.mismatch("bytes")
        }
        return Array(field.bytes)
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    package static func decode(_ field: PostgresField) throws(PostgresError) -> Wrapped? {
        field.isNull ? nil : try Wrapped.decode(field)
    }
}
