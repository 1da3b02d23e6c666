import TallyFileLock

/// The lock that makes `mirror run` one per store: a `FileLock` (an
/// exclusive open-file-description lock, released however the run ends)
/// on `<store>.lock`. See `FileLock` for why it is built that way.
public final class MirrorRunLock {
    private let lock: FileLock

    private init(lock: FileLock) { self.lock = lock }

    /// The lock for the store at `path`; nil when another run holds it.
    public static func acquire(store path: String) throws(MirrorStoreError) -> MirrorRunLock? {
        do {
            return try FileLock.acquire("\(path).lock").map(MirrorRunLock.init)
        } catch {
            throw MirrorStoreError(error.description)
        }
    }

    /// Whether a run holds the lock right now. Never takes it.
    public static func isHeld(store path: String) throws(MirrorStoreError) -> Bool {
        do {
            return try FileLock.isHeld("\(path).lock")
        } catch {
            throw MirrorStoreError(error.description)
        }
    }

    public func release() { lock.release() }
}
