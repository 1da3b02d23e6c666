import CSQLite

/// A prepared statement, prepared once per connection and reused.
///
/// The C boundary is thin and checked: every bind and step return code is
/// checked at once and becomes a `StoreError` naming the statement. Owned by
/// its connection (which finalizes it on close) and used only on the
/// connection's thread.
final class SQLiteStatement {
    let handle: OpaquePointer
    private let db: OpaquePointer
    /// What the statement does, for error messages ("insert change").
    let name: String

    init(handle: OpaquePointer, db: OpaquePointer, name: String) {
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

    func bind(_ index: Int32, _ value: Int64) throws(StoreError) {
        try check(sqlite3_bind_int64(handle, index, value), "bind")
    }

    func bind(_ index: Int32, text: String) throws(StoreError) {
        let rc = text.utf8.withContiguousStorageIfAvailable { bindText(index, $0) }
            ?? Array(text.utf8).withUnsafeBufferPointer { bindText(index, $0) }
        try check(rc, "bind")
    }

    /// Binds bytes as TEXT, valid UTF-8 or not: range bounds are byte strings
    /// compared with memcmp (the BINARY collation).
    func bind(_ index: Int32, textBytes: [UInt8]) throws(StoreError) {
        try check(textBytes.withUnsafeBufferPointer { bindText(index, $0) }, "bind")
    }

    func bind(_ index: Int32, blob: [UInt8]) throws(StoreError) {
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
    func bindAboveAllText(_ index: Int32) throws(StoreError) {
        try check(sqlite3_bind_zeroblob(handle, index, 0), "bind")
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
    func step() throws(StoreError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw error(rc, "step")
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    func run() throws(StoreError) {
        defer { reset() }
        if try step() {
            throw StoreError(code: SQLITE_MISUSE, message: "returned a row", operation: name)
        }
    }

    /// Makes the statement ready for its next use and releases its read
    /// snapshot. The return code of sqlite3_reset only repeats the error of
    /// the last step ("If the most recent call to sqlite3_step(S) … indicated
    /// an error, then sqlite3_reset(S) returns an appropriate error code",
    /// sqlite.org/c3ref/reset.html), which `step` has already thrown;
    /// sqlite3_clear_bindings always returns SQLITE_OK.
    func reset() {
        _ = sqlite3_reset(handle)
        _ = sqlite3_clear_bindings(handle)
    }

    // MARK: Columns (numbered from 0)

    func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    func text(_ column: Int32) -> String {
        // "call sqlite3_column_text() first … then invoke sqlite3_column_bytes()" (sqlite.org/c3ref/column_blob.html)
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    func blob(_ column: Int32) -> [UInt8] {
        // A zero-length BLOB comes back as a NULL pointer.
        guard let pointer = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    func withBlob<R>(_ column: Int32, _ body: (UnsafeRawBufferPointer) throws(StoreError) -> R) throws(StoreError) -> R {
        let pointer = sqlite3_column_blob(handle, column)
        let count = pointer == nil ? 0 : Int(sqlite3_column_bytes(handle, column))
        return try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    // MARK: Errors

    private func check(_ rc: Int32, _ what: String) throws(StoreError) {
        if rc != SQLITE_OK { throw error(rc, what) }
    }

    private func error(_ rc: Int32, _ what: String) -> StoreError {
        StoreError(code: rc, message: String(cString: sqlite3_errmsg(db)), operation: "\(name) (\(what))",
                   systemErrno: sqlite3_system_errno(db))
    }
}
