@preconcurrency import Glibc
import CSQLite
import TallySQLite

/// The store's side of `tally restore`: a restored copy starts a new stretch
/// of the change sequence, and the store it replaces is folded into one file
/// before it is set aside.
extension SQLiteBackup {
    /// How far the sequence jumps ahead when a store is restored: 2^32.
    ///
    /// Clients may have seen seqs past the backup's head D from the hub that
    /// was lost. Were the restored hub to go on from D + 1, its new changes
    /// would reuse those numbers: a client that saw D + 10 on the lost disk
    /// would resume with `since: D + 10` once the new head passed it, and
    /// miss the new D + 1 … D + 10. So the restored store goes on from
    /// D + 2^32 + 1 instead, with its floor at D + 2^32: every `since` a
    /// client can hold is below the floor (or, when the lost hub went past
    /// D + 2^32, above the head until the restored one gets there) and is
    /// answered with a snapshot and `resnapshot: true`, as the protocol
    /// already says. 2^32 is more changes than a hub makes between two
    /// backups (46 hours at the store's whole write rate, ~26,000/s); seqs
    /// stay far below 2^53, the largest integer a JavaScript client reads
    /// exactly, after thousands of restores.
    public static let restoreSeqJump: Int64 = 1 << 32

    /// The largest seq every client reads exactly (2^53 − 1).
    static let maxClientSeq: Int64 = (1 << 53) - 1

    /// Moves the copy at `path` (no hub has it open) to a new stretch of the
    /// sequence, in one transaction: head and floor to the copy's head +
    /// `restoreSeqJump`, the change log emptied (nothing in it could be
    /// resumed from below the new floor), and the old head kept in meta as
    /// `restored_head`, with `restored_at` (ms since the epoch). Records,
    /// lists, indexes and idempotency keys stay as the backup had them.
    ///
    /// - Returns: what the restored store holds.
    public static func markRestored(_ path: String, now: Int64) throws(StoreFileError) -> Summary {
        let before = try inspect(path, checkIntegrity: false)
        guard before.headSeq <= maxClientSeq - restoreSeqJump else {
            throw .sequenceExhausted(path: path, head: before.headSeq)
        }
        let start = before.headSeq + restoreSeqJump
        do throws(StoreError) {
            let connection = try SQLiteConnection(path: path, role: .checkpointer, synchronous: .full)
            defer { connection.close() }
            try connection.execute("BEGIN IMMEDIATE")
            do throws(StoreError) {
                // The keys exist in every schema but change_bytes (migration 3,
                // which measures the then empty log when the hub opens an
                // older store).
                try connection.execute("""
                    DELETE FROM changes;
                    UPDATE meta SET value = \(start) WHERE key IN ('head_seq', 'floor_seq');
                    UPDATE meta SET value = 0 WHERE key IN ('change_count', 'change_bytes');
                    INSERT INTO meta(key, value) VALUES ('\(restoredHeadKey)', \(before.headSeq)), ('restored_at', \(now))
                        ON CONFLICT(key) DO UPDATE SET value = excluded.value;
                    COMMIT;
                    """)
            } catch {
                if connection.inTransaction { try? connection.execute("ROLLBACK") }
                throw error
            }
        } catch {
            throw StoreFileError(error, path: path)
        }
        return try inspect(path, checkIntegrity: false)
    }

    /// Makes the store at `path` one self-contained file: the commits its
    /// WAL holds are checkpointed into it and the `-wal` and `-shm` files
    /// go ("the WAL file … is deleted" when a database leaves WAL mode,
    /// sqlite.org/wal.html), so the file can be renamed without leaving a WAL
    /// behind that SQLite would apply to whatever file takes its name next.
    /// Leaving WAL mode needs the only connection to the file, so it fails
    /// while any other process (a hub, a `tally backup`) has it open.
    /// A hub that opens the file again puts it back in WAL mode.
    public static func foldWAL(_ path: String) throws(StoreFileError) {
        guard access(path, F_OK) == 0 else { throw .missing(path: path) }
        do throws(StoreError) {
            let connection = try SQLiteConnection(path: path, role: .checkpointer, synchronous: .full)
            defer { connection.close() }
            let mode: String
            do {
                mode = try connection.queryText("PRAGMA journal_mode=DELETE")
            } catch where error.isBusy {
                mode = "wal"
            }
            guard mode.lowercased() == "delete" else {
                throw StoreError(code: SQLITE_BUSY,
                                 message: "another process has it open (a hub, or a 'tally backup' reading it): let it finish, then try again",
                                 operation: "fold the WAL into \(path)")
            }
        } catch {
            throw StoreFileError(error, path: path)
        }
        for suffix in ["-wal", "-shm"] where access(path + suffix, F_OK) == 0 {
            guard unlink(path + suffix) == 0 else {
                throw .store(.fileSystem(errno, operation: "remove \(path + suffix)"))
            }
        }
    }
}
