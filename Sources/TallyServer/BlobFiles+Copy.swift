@preconcurrency import Glibc

/// Copying one data directory's photos into another (`tally backup`,
/// `tally restore`).
extension BlobFiles {
    /// What `copyMissing` did.
    struct CopyCount: Sendable, Equatable {
        /// Blobs the source holds, and their bytes.
        var blobs = 0
        var bytes = 0
        /// Of those, how many the target got as hard links, as copies, or
        /// held already.
        var linked = 0
        var copied = 0
        var present = 0
    }

    /// Puts every blob stored here that `target` lacks into `target`.
    ///
    /// Blobs never change once stored (their name is their SHA-256), so a
    /// hard link is as good as a copy and costs neither time nor room: it
    /// is tried first, and each directory that got links is fsynced. Across
    /// file systems (EXDEV) or where links are not allowed, the bytes are
    /// read, checked against the name — a backup must not hand on a file
    /// that rotted — and written as an upload is (temporary file, fsync,
    /// link, directory fsync). Temporary files and foreign names are
    /// skipped. `target` must be prepared (`prepare(dataDirectory:)`).
    func copyMissing(into target: BlobFiles) throws(BackupError) -> CopyCount {
        var count = CopyCount()
        var linking = true
        for (fanOut, names) in storedNames() {
            var linkedHere = false
            for name in names {
                let source = path(name)
                var status = stat()
                guard lstat(source, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { continue }
                count.blobs += 1
                count.bytes += Int(status.st_size)
                if target.exists(name) {
                    count.present += 1
                    continue
                }
                if linking {
                    switch try target.link(name, from: source) {
                    case .linked:
                        count.linked += 1
                        linkedHere = true
                        continue
                    case .present:
                        count.present += 1
                        continue
                    case .unsupported:
                        linking = false
                    }
                }
                try copy(name, into: target)
                count.copied += 1
            }
            if linkedHere {
                do { try target.syncDirectory("\(target.root)/\(fanOut)") } catch { throw BackupError(error) }
            }
        }
        return count
    }

    /// The fan-out directories in order, each with the blob names in it in
    /// order: temporary files and foreign names left out. What a backup
    /// and the import into PostgreSQL walk.
    func storedNames() -> [(fanOut: String, names: [String])] {
        entries(of: root).sorted().filter { $0.utf8.count == 2 }.map { fanOut in
            (fanOut, entries(of: "\(root)/\(fanOut)").sorted().filter { name in
                name.hasPrefix(fanOut) && (try? BlobStore.validate(sha256: name)) != nil
            })
        }
    }

    private enum LinkResult {
        case linked, present, unsupported
    }

    /// Links `source` in under `name`, creating the fan-out directory.
    private func link(_ name: String, from source: String) throws(BackupError) -> LinkResult {
        let directory = "\(root)/\(name.prefix(2))"
        if mkdir(directory, 0o700) == 0 {
            do { try syncDirectory(root) } catch { throw BackupError(error) }
        } else if errno != EEXIST {
            throw .fileSystem(operation: "create the photo directory", path: directory, errno: errno)
        }
        if Glibc.link(source, path(name)) == 0 { return .linked }
        switch errno {
        case EEXIST: return .present
        // Another file system, or one (or a mount) that refuses hard links.
        case EXDEV, EPERM, EMLINK, EOPNOTSUPP: return .unsupported
        case let failure: throw .fileSystem(operation: "link the photo", path: path(name), errno: failure)
        }
    }

    /// Reads, checks and stores one blob in `target`.
    private func copy(_ name: String, into target: BlobFiles) throws(BackupError) {
        do {
            // Gone since the directory was listed: nothing to copy.
            guard let bytes = try read(name) else { return }
            let actual = try BlobStore.sha256Hex(bytes)
            guard actual == name else { throw BackupError.photoDamaged(path: path(name), actual: actual) }
            _ = try target.write(name, bytes)
        } catch let error as BackupError {
            throw error
        } catch let error as BlobError {
            throw BackupError(error)
        } catch {
            throw .fileSystem(operation: "copy the photo", path: path(name), errno: EIO)
        }
    }
}
