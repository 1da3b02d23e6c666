import CSQLite
import TallyPostgres

/// Photos in the hub's PostgreSQL database (`tally_blobs`, schema 4), so
/// that every hub sharing the database serves a photo uploaded through any
/// one of them. The hub's `BlobStore` checks what goes in (type, signature,
/// size, hash) and keeps the quota; this is only the table.
///
/// A photo is one row: its SHA-256 as 64 lowercase hex digits (the primary
/// key), its canonical type, its size and its bytes. The bytes travel as a
/// binary `bytea` parameter and come back as a binary field: a 16 MiB photo
/// is 16 MiB on the wire, never a 32 MiB hex string. The column is stored
/// `EXTERNAL` (out of line, uncompressed): photos are compressed already,
/// and PostgreSQL would otherwise try pglz on each one first ("Storage"
/// under ALTER TABLE: "EXTERNAL is for external, uncompressed data").
///
/// Each statement is one autocommit round trip on a connection of the pool
/// (`PostgresPool`): uploads run on several worker threads at once. An
/// insert that meets the same photo, from this hub or another, does nothing
/// (`ON CONFLICT DO NOTHING`) and says so, which keeps uploads idempotent
/// without a lock; once the statement returns the row is committed, so
/// durable as the database's commits are.
public final class PostgresBlobTable: Sendable {
    private let pool: PostgresPool

    /// Connects, brings the schema up to date (the hub's store has done so
    /// already; a table opened on its own does it here) and keeps the
    /// connection for the first statements.
    ///
    /// - Parameter connections: the most sessions open at once, one per
    ///   thread storing or reading a photo at the same moment.
    public init(url: String, connections: Int = 4) throws(SharedTableError) {
        let operation = "open the photo table"
        let parsed: PostgresURL
        do throws(PostgresError) {
            parsed = try PostgresURL(parsing: url)
        } catch {
            throw SharedTableError(error, doing: operation)
        }
        var options = PostgresConnection.Options()
        options.applicationName = "tally-hub-blobs"
        pool = PostgresPool(url: parsed, options: options, capacity: connections)
        let connection: PostgresConnection
        do throws(PostgresError) {
            connection = try PostgresConnection(url: parsed, options: options)
        } catch {
            throw SharedTableError(error, doing: operation)
        }
        do throws(StoreError) {
            try PostgresSchema.migrate(connection)
        } catch {
            throw SharedTableError(unreachable: error.code == SQLITE_IOERR, operation: operation, detail: error.description)
        }
        pool.adopt(connection)
    }

    /// Bytes all photos take, in one SUM: what the hub counts its quota
    /// from at start.
    public func totalBytes() throws(SharedTableError) -> Int {
        try pool.withConnection(doing: "count the photos' bytes") { connection throws(PostgresError) in
            Int(try connection.execute(Self.total).firstRow().int64(0))
        }
    }

    public func contains(_ sha256: String) throws(SharedTableError) -> Bool {
        try pool.withConnection(doing: "look a photo up") { connection throws(PostgresError) in
            !(try connection.execute(Self.exists, [.text(sha256)]).isEmpty)
        }
    }

    /// Stores a checked photo. Returns false when a row of that name was
    /// there already (the bytes are the same: the name is their hash).
    public func insert(_ sha256: String, type: String, bytes: [UInt8]) throws(SharedTableError) -> Bool {
        try pool.withConnection(doing: "store a photo") { connection throws(PostgresError) in
            try connection.execute(Self.insert, [.text(sha256), .text(type), .int8(Int64(bytes.count)),
                                                 .bytea(bytes)]).affectedRows == 1
        }
    }

    /// The photo's bytes, or nil. (Its `type` column is for people reading
    /// the table: the hub sniffs the type from the bytes, as for files.)
    public func read(_ sha256: String) throws(SharedTableError) -> [UInt8]? {
        try pool.withConnection(doing: "read a photo") { connection throws(PostgresError) in
            try connection.execute(Self.read, [.text(sha256)]).first?.bytes(0)
        }
    }

    /// A kept thumbnail (`tally_blob_thumbs`, schema 6), or nil.
    public func readThumbnail(_ sha256: String, width: Int, format: String) throws(SharedTableError) -> [UInt8]? {
        try pool.withConnection(doing: "read a thumbnail") { connection throws(PostgresError) in
            try connection.execute(Self.readThumbnail, [.text(sha256), .int8(Int64(width)), .text(format)]).first?.bytes(0)
        }
    }

    /// Keeps a thumbnail. Two hubs making the same one at once both insert;
    /// the second does nothing (the bytes would do as well as the first's).
    public func insertThumbnail(_ sha256: String, width: Int, format: String, bytes: [UInt8]) throws(SharedTableError) {
        try pool.withConnection(doing: "keep a thumbnail") { connection throws(PostgresError) in
            _ = try connection.execute(Self.insertThumbnail, [.text(sha256), .int8(Int64(width)), .text(format),
                                                              .bytea(bytes)])
        }
    }

    /// Closes the sessions; later calls fail.
    public func close() {
        pool.close()
    }

    static let total = PostgresStatement("count photo bytes", "SELECT coalesce(sum(size), 0)::int8 FROM tally_blobs")
    static let exists = PostgresStatement("look up photo", "SELECT 1 FROM tally_blobs WHERE sha256 = $1",
                                          parameters: [.text])
    static let insert = PostgresStatement("insert photo", """
        INSERT INTO tally_blobs(sha256, type, size, data) VALUES ($1, $2, $3, $4)
        ON CONFLICT (sha256) DO NOTHING
        """, parameters: [.text, .text, .int8, .bytea])
    static let readThumbnail = PostgresStatement("read thumbnail", """
        SELECT data FROM tally_blob_thumbs WHERE sha256 = $1 AND width = $2 AND format = $3
        """, parameters: [.text, .int8, .text])
    static let insertThumbnail = PostgresStatement("keep thumbnail", """
        INSERT INTO tally_blob_thumbs(sha256, width, format, data) VALUES ($1, $2, $3, $4)
        ON CONFLICT (sha256, width, format) DO NOTHING
        """, parameters: [.text, .int8, .text, .bytea])
    static let read = PostgresStatement("read photo", "SELECT data FROM tally_blobs WHERE sha256 = $1",
                                        parameters: [.text])
}
