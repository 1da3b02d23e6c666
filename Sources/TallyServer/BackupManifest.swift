@preconcurrency import Glibc
import TallyProtocol
import TallyStore

/// `tally-backup.json`, the last file a backup writes: its presence says the
/// backup is complete (an interrupted one has none, and `restore` refuses
/// it), and it says what the backup holds, for people and scripts.
///
/// ```json
/// {"format": 1, "schema": 6, "head": 1234, "floor": 0, "records": 10, "lists": 2,
///  "photos": 5, "photoBytes": 1048576, "created": 1764460800000}
/// ```
public struct BackupManifest: Sendable, Equatable {
    public static let fileName = "tally-backup.json"
    /// The layout this build writes and reads: `tally.sqlite3`, `blobs/`, this file.
    public static let currentFormat: Int64 = 1

    public var format: Int64 = BackupManifest.currentFormat
    /// The store's schema version (`PRAGMA user_version`).
    public var schemaVersion: Int64
    /// The store's head and floor seqs when it was copied.
    public var headSeq: Int64
    public var floorSeq: Int64
    public var records: Int
    public var lists: Int
    /// Photos (blobs) in the backup, and their bytes.
    public var photos: Int
    public var photoBytes: Int
    /// When the store was copied (ms since the epoch).
    public var created: Int64

    public var json: JSONValue {
        .object(JSONObject([
            ("format", .number(JSONNumber(format))), ("schema", .number(JSONNumber(schemaVersion))),
            ("head", .number(JSONNumber(headSeq))), ("floor", .number(JSONNumber(floorSeq))),
            ("records", .number(JSONNumber(records))), ("lists", .number(JSONNumber(lists))),
            ("photos", .number(JSONNumber(photos))), ("photoBytes", .number(JSONNumber(photoBytes))),
            ("created", .number(JSONNumber(created))),
        ]))
    }

    public init(schemaVersion: Int64, headSeq: Int64, floorSeq: Int64, records: Int, lists: Int, photos: Int,
                photoBytes: Int, created: Int64) {
        self.schemaVersion = schemaVersion
        self.headSeq = headSeq
        self.floorSeq = floorSeq
        self.records = records
        self.lists = lists
        self.photos = photos
        self.photoBytes = photoBytes
        self.created = created
    }

    /// The manifest of a backup that copied `store` and `photos`.
    init(store: SQLiteBackup.Summary, photos: BlobFiles.CopyCount, created: Int64) {
        self.init(schemaVersion: store.schemaVersion, headSeq: store.headSeq, floorSeq: store.floorSeq,
                  records: store.recordCount, lists: store.listCount, photos: photos.blobs, photoBytes: photos.bytes,
                  created: created)
    }

    /// Reads `directory/tally-backup.json`.
    /// - Throws: `.notABackup` naming what is missing or wrong.
    static func read(from directory: String) throws(BackupError) -> BackupManifest {
        let path = directory + "/" + fileName
        guard let bytes = readSmallFile(path) else {
            throw .notABackup(source: directory, reason: "it has no \(fileName), which 'tally backup' writes last "
                + "(a backup that was interrupted has none: take a new one)")
        }
        guard let object = (try? JSONValue.parse(bytes))?.objectValue else {
            throw .notABackup(source: directory, reason: "\(fileName) is not a JSON object")
        }
        func integer(_ key: String) throws(BackupError) -> Int64 {
            guard let value = object[key]?.numberValue?.int64Value, value >= 0 else {
                throw .notABackup(source: directory, reason: "\(fileName) has no whole number \"\(key)\"")
            }
            return value
        }
        let format = try integer("format")
        guard format == currentFormat else {
            throw .notABackup(source: directory, reason: "\(fileName) says format \(format); this build reads format \(currentFormat)")
        }
        return BackupManifest(schemaVersion: try integer("schema"), headSeq: try integer("head"),
                              floorSeq: try integer("floor"), records: Int(try integer("records")),
                              lists: Int(try integer("lists")), photos: Int(try integer("photos")),
                              photoBytes: Int(try integer("photoBytes")), created: try integer("created"))
    }

    /// Writes the manifest into `directory` as a complete file or not at
    /// all: a temporary file, fsync, rename, directory fsync.
    func write(to directory: String) throws(BackupError) {
        let path = directory + "/" + Self.fileName
        let temporary = path + ".tmp"
        let text = Array((json.prettyString + "\n").utf8)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .fileSystem(operation: "create", path: temporary, errno: errno) }
        var failure = BlobFiles.writeFully(fd, text)
        if failure == 0, fsync(fd) != 0 { failure = errno }
        close(fd)
        guard failure == 0 else {
            unlink(temporary)
            throw .fileSystem(operation: "write", path: temporary, errno: failure)
        }
        guard rename(temporary, path) == 0 else {
            let failure = errno
            unlink(temporary)
            throw .fileSystem(operation: "rename \(temporary) to", path: path, errno: failure)
        }
        try HubBackup.syncDirectory(directory)
    }

    /// The bytes of a file of at most 64 KiB, nil when it cannot be read.
    private static func readSmallFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 64 << 10)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n > 0 { count += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            break
        }
        return Array(bytes[..<count])
    }
}
