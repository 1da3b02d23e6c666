@preconcurrency import Glibc
import Testing
import TallyFileLock
@testable import TallyServer
import TallyStore
import TallyTestSupport

/// One hub per data directory (a lock file naming its holder), and start-up
/// errors that name the real cause when the directory cannot be written.
@Suite("Hub: data directory")
struct HubDataDirectoryTests {
    /// Until the lock, a second hub started on the same directory and the
    /// first write that met the other's seqs killed one of them.
    @Test func aSecondHubOnTheSameDirectoryIsRefusedAndNamesTheFirst() throws {
        let directory = try TemporaryDirectory(prefix: "tally-lock")
        let first = try HubFixture(dataDirectory: directory.path)
        do {
            _ = try HubFixture(dataDirectory: directory.path)
            Issue.record("a second hub started on \(directory.path)")
        } catch let error as HubStartError {
            guard case .dataDirectoryInUse(let path, let pid) = error else {
                Issue.record("refused for another reason: \(error)")
                first.close()
                return
            }
            #expect(path == directory.path)
            #expect(pid == getpid())
            #expect(error.isAboutTheDataDirectory)
            #expect("\(error)" == "the data directory \(directory.path) is in use by another hub (pid \(getpid())); stop it or use another --data")
        }
        // The first is unharmed, and the directory is free again once it stops.
        let client = try first.connect()
        try client.ok(#"{"op":"set","name":"still/here","data":{}}"#)
        first.close()
        try withHub(dataDirectory: directory.path) { (hub: HubFixture) throws in
            #expect(try hub.connect().ok(#"{"op":"get","name":"still/here"}"#)["version"] == 1)
        }
        for name in [DataDirectory.lockFileName] { unlink(directory.path + "/" + name) }
    }

    /// A hub that was killed leaves its PID in the file but no lock: the
    /// next hub starts and writes its own.
    @Test func aStalePIDIsNoLock() throws {
        let directory = try TemporaryDirectory(prefix: "tally-lock")
        let path = directory.path + "/" + DataDirectory.lockFileName
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = write(fd, "999999\n", 7)
        close(fd)
        try withHub(dataDirectory: directory.path) { (_: HubFixture) throws in
            #expect(FileLock.recordedHolder(of: path) == getpid())
            #expect(try FileLock.isHeld(path))
        }
        #expect(try !FileLock.isHeld(path), "released at shutdown")
        unlink(path)
    }

    @Test func inMemoryNeedsNoLock() throws {
        let first = try HubFixture()
        defer { first.close() }
        let second = try HubFixture()
        second.close()
    }

    /// Store and blob errors from the file system become one sentence
    /// that says what is wrong with the directory and what to do.
    @Test func fileSystemRefusalsNameTheCauseAndTheRemedy() {
        let readOnly = HubStartError(opening: StoreError(code: 8, message: "Read-only file system",
                                                         operation: "open tally.lock", systemErrno: EROFS), in: "/srv/d")
        #expect(readOnly.isAboutTheDataDirectory)
        #expect("\(readOnly)".contains("/srv/d is on a read-only file system"))
        #expect("\(readOnly)".contains("remount it read-write"))
        #expect(!"\(readOnly)".contains("disk full"))
        let denied = HubStartError(opening: BlobError.storageFailed(operation: "create the blob directory",
                                                                   path: "/srv/d/blobs", errno: EACCES), in: "/srv/d")
        #expect("\(denied)".contains("is not writable by this user"))
        #expect("\(denied)".contains("Permission denied"))
        #expect("\(denied)".contains("chown or chmod"))
        let full = HubStartError(opening: StoreError(code: 13, message: "database or disk is full", operation: "commit",
                                                     systemErrno: ENOSPC), in: "/srv/d")
        #expect("\(full)".contains("is full") && "\(full)".contains("free some space"))
        let other = HubStartError(opening: StoreError(code: 11, message: "malformed", operation: "open"), in: "/srv/d")
        #expect(!other.isAboutTheDataDirectory)
    }

    /// The real thing where the file system lets the test see it: a
    /// directory this user may not write (root may write anywhere, so run
    /// as root this checks the store's own answer: the directory is fine).
    @Test func anUnwritableDirectoryIsNamedAtOpen() throws {
        let parent = try TemporaryDirectory(prefix: "tally-ro")
        let directory = parent.path + "/data"
        mkdir(directory, 0o500)
        defer { chmod(directory, 0o700); rmdir(directory) }
        guard access(directory, W_OK) != 0 else { return }  // root
        do {
            _ = try SQLiteStore(directory: directory)
            Issue.record("opened a store in a directory it cannot write")
        } catch {
            #expect(error.systemErrno == EACCES)
            #expect("\(HubStartError(opening: error, in: directory))".contains("not writable by this user"))
        }
    }
}
