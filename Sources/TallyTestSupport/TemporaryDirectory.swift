@preconcurrency import Glibc

/// A test's failure to set something up, with what went wrong.
public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A fresh directory under /tmp, removed with everything in it on deinit.
/// Shared by the test targets (certificates now, stores later).
public final class TemporaryDirectory {
    public let path: String

    /// - Parameter parent: where to make it (`/dev/shm` for another file system than /tmp's).
    public init(prefix: String = "tally", in parent: String = "/tmp") throws {
        var template = Array("\(parent)/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer -> String? in
            guard let base = buffer.baseAddress, let result = mkdtemp(base) else { return nil }
            return String(cString: result)
        }
        guard let made else { throw TestFailure("mkdtemp failed: errno \(errno)") }
        path = made
    }

    deinit {
        Self.remove(path)
    }

    /// Removes `directory` and everything under it, without following
    /// symbolic links (tests make nested trees: photo stores, backups).
    private static func remove(_ directory: String) {
        if let handle = opendir(directory) {
            var names: [String] = []
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
                }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(handle)
            for name in names {
                let path = directory + "/" + name
                var status = stat()
                if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR {
                    remove(path)
                } else {
                    unlink(path)
                }
            }
        }
        rmdir(directory)
    }
}
