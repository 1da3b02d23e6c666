@preconcurrency import Glibc

/// The directories the client's local files live in (the mirror's store,
/// the intake outbox, its photos and lock files), made on first use.
public enum LocalDirectory {
    /// The directory part of a file path ("." for a bare file name).
    public static func of(file path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// mkdir -p, private to the user (0700: the records and photos are
    /// theirs). The failure names the directory that could not be made.
    public static func create<Failure: SQLiteFailure>(_ path: String, as _: Failure.Type) throws(Failure) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            if mkdir(current, 0o700) != 0, errno != EEXIST {
                throw Failure("cannot create the directory '\(current)': \(String(cString: strerror(errno)))")
            }
        }
    }
}
