@preconcurrency import Glibc
import CSQLite
import TallySQLite

/// Gives the WAL file its working size before the first commit, so that no
/// commit has to grow it.
///
/// A commit that appends past the end of the WAL makes the file system
/// allocate blocks inside the commit's fdatasync(2). On this project's
/// machine (ext4 without a journal, mounted with `discard`) that added
/// write requests and discards to durable commits:
/// `scripts/device-writes-per-set.py`, 300 sets at 100/s on a fresh hub,
/// counted 3.0–3.9 writes (the flush included) and 0.1–0.5 discards per set
/// on a growing WAL, and a steady 3.0 and none inside a presized one; hub
/// CPU per delivered durable update fell by about a tenth (commit 2c2f288;
/// BENCHMARKS.md, "Fan-out and durable updates"). Once a checkpoint has
/// copied everything, the next writer starts the WAL over from its
/// beginning and overwrites it without truncating it (sqlite.org/wal.html,
/// "Checkpointing"), so a busy store reaches the cheap case on its own —
/// but only after its first checkpoint (1,000 pages: minutes at a stock
/// room's write rate), and the close's TRUNCATE checkpoint sends every
/// restart back to an empty file.
///
/// The zeros written past the end are never taken for frames: a frame is
/// valid only when its salts match the WAL header's and its checksum matches
/// the running checksum (sqlite.org/fileformat2.html, "WAL File Format"), so
/// recovery stops at the first zero frame, exactly as it stops at the stale
/// frames a reused WAL holds past its current end. Space that
/// `posix_fallocate` merely reserves would not do: the first write into each
/// of its blocks still changes the block map.
extension SQLiteConnection {
    /// Frames the WAL is sized for: the checkpoint threshold, plus a quarter
    /// for the commits that land while the checkpoint runs.
    static let presizedWALFrames: Int64 = Int64(SQLiteCheckpointer.walPagesThreshold) * 5 / 4

    /// Writes zeros after the WAL's last byte until the file can hold
    /// `frames` frames, through SQLite's own handle on the file and under
    /// the write lock, so nothing is appended meanwhile. Bytes already in
    /// the file (frames a crashed process left for recovery) are untouched.
    ///
    /// - Returns: the bytes written (0 when the file was already that big).
    @discardableResult
    func presizeWAL(frames: Int64 = presizedWALFrames) throws(StoreError) -> Int64 {
        let pageSize = try queryInt("PRAGMA page_size")
        // A WAL is a 32-byte header, then frames of a 24-byte header and one page.
        let target = 32 + frames * (24 + pageSize)
        try execute("BEGIN IMMEDIATE")
        do throws(StoreError) {
            let written = try appendZeros(upTo: target)
            try execute("COMMIT")
            return written
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func appendZeros(upTo target: Int64) throws(StoreError) -> Int64 {
        // SQLITE_FCNTL_JOURNAL_POINTER "returns the sqlite3_file object
        // associated with the journal file instead of the main database"
        // (sqlite.org/c3ref/file_control.html) — in WAL mode, the WAL, which
        // a write transaction has open.
        var pointer: UnsafeMutablePointer<sqlite3_file>?
        try check(sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &pointer), "find the WAL file")
        guard let file = pointer, let methods = file.pointee.pMethods,
              let fileSize = methods.pointee.xFileSize, let write = methods.pointee.xWrite,
              let sync = methods.pointee.xSync else {
            throw StoreError(code: SQLITE_ERROR, message: "the WAL file is not open", operation: "presize the WAL")
        }
        var size: sqlite3_int64 = 0
        try check(fileSize(file, &size), "read the WAL's size")
        guard size < target else { return 0 }
        let zeros = [UInt8](repeating: 0, count: 65_536)
        var offset = size
        while offset < target {
            let count = Int32(min(Int64(zeros.count), target - offset))
            let rc = zeros.withUnsafeBytes { write(file, $0.baseAddress, count, offset) }
            guard rc == SQLITE_OK else {
                let system = sqlite3_system_errno(db)
                let reason = system == 0 ? String(cString: sqlite3_errstr(rc)) : String(cString: strerror(system))
                throw StoreError(code: rc, message: "cannot write \(target - size) bytes to the WAL: \(reason)",
                                 operation: "presize the WAL", systemErrno: system)
            }
            offset += Int64(count)
        }
        // Once, so the first commit does not pay for the new blocks' allocation.
        try check(sync(file, SQLITE_SYNC_NORMAL), "sync the presized WAL")
        return target - size
    }
}
