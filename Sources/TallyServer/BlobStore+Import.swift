@preconcurrency import Glibc
import TallyStore

/// Moving the photos of a hub on PostgreSQL out of its data directory and
/// into the database, once.
///
/// Until photos lived in `tally_blobs`, a hub on PostgreSQL kept them under
/// `<data>/blobs/` like a SQLite hub. Left there, they would vanish from
/// `GET /v1/blobs/…` after an upgrade while records still name them, and no
/// other hub would ever serve them. So at start each one is read, checked
/// against its name (a file that rotted is left where it is and counted),
/// stored (idempotently: an interrupted import is simply run again), and
/// counted in the quota; then the directory is renamed `blobs.imported`
/// for the operator to delete once satisfied. A hub that finds no
/// `blobs/` does nothing.
extension BlobStore {
    /// What `importFiles` did.
    struct Imported: Sendable, Equatable {
        var photos = 0
        var bytes = 0
        /// Files whose bytes do not hash to their name, or have no image
        /// signature: not imported, left in the renamed directory.
        var damaged = 0
        /// Where the directory went.
        var movedTo = ""
    }

    /// Imports `<directory>/blobs/` into the database backend; nil when
    /// there is nothing to import or the backend is not the database.
    ///
    /// - Throws: `.databaseFailed` when a photo cannot be stored (nothing
    ///   is renamed then: the next start imports again), `.storageFailed`
    ///   when a file cannot be read or the directory not renamed.
    func importFiles(fromDataDirectory directory: String) throws(BlobError) -> Imported? {
        guard case .database(let table) = backend else { return nil }
        let files = BlobFiles(root: directory + "/blobs")
        var status = stat()
        guard lstat(files.root, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else { return nil }
        var imported = Imported()
        for (_, names) in files.storedNames() {
            for name in names {
                guard let bytes = try files.read(name) else { continue }
                guard try BlobStore.sha256Hex(bytes) == name, let type = BlobSignature.sniff(bytes) else {
                    imported.damaged += 1
                    continue
                }
                let created: Bool
                do throws(SharedTableError) {
                    created = try table.insert(name, type: type, bytes: bytes)
                } catch {
                    throw BlobError(error)
                }
                if created { used.add(bytes.count, ordering: .relaxed) }
                imported.photos += 1
                imported.bytes += bytes.count
            }
        }
        imported.movedTo = try Self.setAside(files.root)
        try files.syncDirectory(directory)
        return imported
    }

    /// Renames `root` to `root.imported` (or `root.imported-2`, … when that
    /// is taken) and returns the new path.
    private static func setAside(_ root: String) throws(BlobError) -> String {
        for attempt in 1...100 {
            let target = root + ".imported" + (attempt == 1 ? "" : "-\(attempt)")
            if access(target, F_OK) == 0 { continue }
            guard rename(root, target) == 0 else {
                throw .storageFailed(operation: "set the imported photo directory aside", path: root, errno: errno)
            }
            return target
        }
        throw .storageFailed(operation: "set the imported photo directory aside", path: root, errno: EEXIST)
    }
}
