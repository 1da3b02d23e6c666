import CSQLite

/// A prepared statement, prepared once per connection and reused.
///
/// The C boundary is thin and checked: every bind and step return code is
/// checked at once and becomes an `SQLiteError` naming the statement. Owned by
/// its connection (which finalizes it on close) and used only on the
/// connection's thread.
package final class SQLiteStatement {
    package let handle: OpaquePointer
    private let db: OpaquePointer
    /// What the statement does, for error messages ("insert change").
    package let name: String

    package init(handle: OpaquePointer, db: OpaquePointer, name: String) {
        self.handle = handle
        self.db = db
        self.name = name
    }

    /// SQLITE_TRANSIENT: SQLite copies the bytes before the bind returns, so
    /// Swift's buffers need only live for the call. (The C macro does not
    /// import; its value is the destructor pointer -1.)
    private static var transient: sqlite3_destructor_type {
        unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    }

    // MARK: Binding (parameters are numbered from 1)

    package func bind(_ index: Int32, _ value: Int64) throws(SQLiteError) {
        try check(sqlite3_bind_int64(handle, index, value), "bind")
    }

    package func bind(_ index: Int32, text: String) throws(SQLiteError) {
        let rc = text.utf8.withContiguousStorageIfAvailable { bindText(index, $0) }
            ?? Array(text.utf8).withUnsafeBufferPointer { bindText(index, $0) }
        try check(rc, "bind")
    }

    /// Binds bytes as TEXT, valid UTF-8 or not: range bounds are byte strings
    /// compared with memcmp (the BINARY collation).
    package func bind(_ index: Int32, textBytes: [UInt8]) throws(SQLiteError) {
        try check(textBytes.withUnsafeBufferPointer { bindText(index, $0) }, "bind")
    }

    package func bind(_ index: Int32, blob: [UInt8]) throws(SQLiteError) {
        let rc = blob.withUnsafeBytes { raw -> Int32 in
            // "If the third parameter to sqlite3_bind_blob() is a NULL pointer then the fourth
            // parameter is ignored and the end result is the same as sqlite3_bind_null()"
            // (sqlite.org/c3ref/bind_blob.html): an empty blob is bound as a zero-length blob.
            guard let base = raw.baseAddress, raw.count > 0 else { return sqlite3_bind_zeroblob(handle, index, 0) }
            return sqlite3_bind_blob64(handle, index, base, sqlite3_uint64(raw.count), Self.transient)
        }
        try check(rc, "bind")
    }

    /// A zero-length BLOB: "A TEXT value is less than a BLOB value"
    /// (sqlite.org/datatype3.html#sort_order), so `name < ?` with it bound is
    /// true for every name, and the index range stays open-ended.
    package func bindAboveAllText(_ index: Int32) throws(SQLiteError) {
        try check(sqlite3_bind_zeroblob(handle, index, 0), "bind")
    }

    package func bind(_ index: Int32, _ value: Double) throws(SQLiteError) {
        try check(sqlite3_bind_double(handle, index, value), "bind")
    }

    package func bindNull(_ index: Int32) throws(SQLiteError) {
        try check(sqlite3_bind_null(handle, index), "bind")
    }

    private func bindText(_ index: Int32, _ bytes: UnsafeBufferPointer<UInt8>) -> Int32 {
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            // A NULL pointer would bind SQL NULL; an empty string binds "" (copied, so the
            // temporary pointer is fine).
            return sqlite3_bind_text(handle, index, "", 0, Self.transient)
        }
        return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
            sqlite3_bind_text64(handle, index, $0, sqlite3_uint64(bytes.count), Self.transient, UInt8(SQLITE_UTF8))
        }
    }

    // MARK: Stepping

    /// Steps once: true for a row, false when done.
    package func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw error(rc, "step")
        }
    }

    /// Steps to the first row; "no row" is an error naming `what`.
    func firstRow(_ what: String) throws(SQLiteError) -> SQLiteStatement {
        guard try step() else { throw SQLiteError(code: SQLITE_ERROR, message: "no row", operation: what) }
        return self
    }

    /// Runs a statement that returns no rows, then resets it.
    package func run() throws(SQLiteError) {
        defer { reset() }
        if try step() {
            throw SQLiteError(code: SQLITE_MISUSE, message: "returned a row", operation: name)
        }
    }

    /// Makes the statement ready for its next use and releases its read
    /// snapshot. The return code of sqlite3_reset only repeats the error of
    /// the last step ("If the most recent call to sqlite3_step(S) … indicated
    /// an error, then sqlite3_reset(S) returns an appropriate error code",
    /// sqlite.org/c3ref/reset.html), which `step` has already thrown;
    /// sqlite3_clear_bindings always returns SQLITE_OK.
    package func reset() {
        _ = sqlite3_reset(handle)
        _ = sqlite3_clear_bindings(handle)
    }

    // MARK: Columns (numbered from 0)

    /// How many columns each row has.
    package var columnCount: Int32 { sqlite3_column_count(handle) }

    /// SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB or SQLITE_NULL.
    package func columnType(_ column: Int32) -> Int32 {
        sqlite3_column_type(handle, column)
    }

    package func double(_ column: Int32) -> Double {
        sqlite3_column_double(handle, column)
    }

    package func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    package func text(_ column: Int32) -> String {
        // "call sqlite3_column_text() first … then invoke sqlite3_column_bytes()" (sqlite.org/c3ref/column_blob.html)
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    package func blob(_ column: Int32) -> [UInt8] {
        // A zero-length BLOB comes back as a NULL pointer.
        guard let pointer = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    package func withBlob<R>(_ column: Int32, _ body: (UnsafeRawBufferPointer) throws(SQLiteError) -> R) throws(SQLiteError) -> R {
        let pointer = sqlite3_column_blob(handle, column)
        let count = pointer == nil ? 0 : Int(sqlite3_column_bytes(handle, column))
        return try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    // MARK: Errors

    private func check(_ rc: Int32, _ what: String) throws(SQLiteError) {
        if rc != SQLITE_OK { throw error(rc, what) }
    }

    private func error(_ rc: Int32, _ what: String) -> SQLiteError {
        SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db)), operation: "\(name) (\(what))",
                   systemErrno: sqlite3_system_errno(db))
    }
}
