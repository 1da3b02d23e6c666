@preconcurrency import Glibc
import CSQLite
import TallySQLite
import TallyTestSupport
import Testing
@_spi(Testing) @testable import TallyStore

/// `SQLiteBackup`: a copy of a store being written is the store as of one
/// commit; what is not a Tally store is told apart; a restored copy starts a
/// new stretch of the sequence; a WAL is folded in before a store is set aside.
@Suite struct SQLiteBackupTests {
    /// Each commit puts record `r<seq>` and change `seq`, so a copy is
    /// consistent exactly when its head, its records and its log agree.
    private func commitNumbered(_ h: StoreHarness, _ seqs: ClosedRange<Int64>) throws {
        for seq in seqs {
            try h.commit([.putRecord(record("r\(seq)", seq: seq))], changes: [change(seq, .record, "r\(seq)")])
        }
    }

    private func expectConsistent(_ path: String, head: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let copy = try StoreHarness(.sqlite, directory: try reopenable(path), start: false)
        let state = try copy.reader.state()
        #expect(state.headSeq == head, sourceLocation: sourceLocation)
        #expect(state.recordCount == Int(head), sourceLocation: sourceLocation)
        #expect(try copy.reader.changes(after: 0, limit: Int(head) + 10).map(\.seq) == Array(stride(from: 1, through: head, by: 1)),
                sourceLocation: sourceLocation)
        if head > 0 { #expect(try copy.reader.record("r\(head)")?.seq == head, sourceLocation: sourceLocation) }
        #expect(try copy.reader.record("r\(head + 1)") == nil, sourceLocation: sourceLocation)
    }

    /// A directory holding a copy of the file at `path` as `tally.sqlite3`,
    /// for a harness to open (it may change the file: WAL mode).
    private func reopenable(_ path: String) throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory(prefix: "tally-copy")
        try copyFile(path, directory.path + "/" + SQLiteStore.fileName)
        return directory
    }

    /// The writer is stopped inside the transaction of seq 11, before its
    /// COMMIT, holding the write lock: the copy neither waits for it nor
    /// sees any of it, and the writer commits once let go.
    @Test func copyTakenDuringACommitHoldsWhatWasCommittedBefore() throws {
        let entered = Latch()
        let released = Latch()
        let hooks = StoreTestHooks(beforeCommit: { tokens in
            guard tokens.contains(11) else { return }
            entered.open()
            try? released.wait()
        })
        let h = try StoreHarness(.sqlite, hooks: hooks)
        try commitNumbered(h, 1...10)
        let held = h.unit([.putRecord(record("r11", seq: 11))], changes: [change(11, .record, "r11")])
        h.store.submit(held)
        try entered.wait()
        var copied: SQLiteBackup.Summary?
        let target = try TemporaryDirectory(prefix: "tally-backup")
        let path = target.path + "/" + SQLiteStore.fileName
        do {
            defer { released.open() }
            copied = try SQLiteBackup.copy(from: try #require(h.directory).path + "/" + SQLiteStore.fileName, to: path)
        }
        let summary = try #require(copied)
        #expect(try h.recorder.wait(for: [held.token])[0].error == nil)

        #expect(summary == SQLiteBackup.Summary(schemaVersion: SQLiteSchema.latestVersion, headSeq: 10, floorSeq: 0,
                                                recordCount: 10, listCount: 0, bytes: summary.bytes, restoredHead: nil))
        try expectConsistent(path, head: 10)
    }

    /// Copies taken while a burst of commits goes on: each is the store as
    /// of some commit, never between two.
    @Test func copiesDuringABurstAreEachOneCommit() throws {
        let h = try StoreHarness(.sqlite)
        let source = try #require(h.directory).path + "/" + SQLiteStore.fileName
        let units = (Int64(1)...3_000).map { seq in
            h.unit([.putRecord(record("r\(seq)", seq: seq))], changes: [change(seq, .record, "r\(seq)")])
        }
        for unit in units { h.store.submit(unit) }
        let target = try TemporaryDirectory(prefix: "tally-backup")
        var heads: [Int64] = []
        for copy in 0..<3 {
            let path = "\(target.path)/copy-\(copy)"
            let summary = try SQLiteBackup.copy(from: source, to: path)
            try expectConsistent(path, head: summary.headSeq)
            heads.append(summary.headSeq)
        }
        #expect(try h.recorder.wait(for: units.map(\.token)).allSatisfy { $0.error == nil })
        #expect(heads == heads.sorted())
    }

    /// One self-contained rollback-journal file, private to its owner:
    /// readable from read-only media and by `sqlite3`, no -wal or -shm.
    @Test func theCopyIsOnePrivateFileOutOfWALMode() throws {
        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...3)
        try h.commit(putList("l", ["a", "b"]), changes: [change(4, .list, "l")])
        let target = try TemporaryDirectory(prefix: "tally-backup")
        let path = target.path + "/" + SQLiteStore.fileName
        let summary = try SQLiteBackup.copy(from: try #require(h.directory).path + "/" + SQLiteStore.fileName, to: path)
        #expect(summary.headSeq == 4 && summary.recordCount == 3 && summary.listCount == 1)
        for suffix in ["-wal", "-shm", "-journal"] { #expect(access(path + suffix, F_OK) != 0, "\(suffix) left") }
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600)
        let connection = try SQLiteConnection(path: path, role: .reader, synchronous: .full)
        #expect(try connection.queryText("PRAGMA journal_mode") == "delete")
        connection.close()
        // A destination that exists is never overwritten.
        #expect(throws: StoreFileError.self) { try SQLiteBackup.copy(from: path, to: path) }
        #expect(throws: StoreFileError.missing(path: target.path + "/none")) {
            try SQLiteBackup.copy(from: target.path + "/none", to: target.path + "/other")
        }
        #expect(access(target.path + "/other", F_OK) != 0, "a failed copy leaves no file")
    }

    @Test func inspectTellsWhatIsNotAStore() throws {
        let directory = try TemporaryDirectory(prefix: "tally-inspect")
        let base = directory.path
        #expect(throws: StoreFileError.missing(path: base + "/none")) {
            try SQLiteBackup.inspect(base + "/none", checkIntegrity: false)
        }
        let text = base + "/notes.txt"
        let fd = open(text, O_WRONLY | O_CREAT, 0o600)
        _ = write(fd, String(repeating: "not a database\n", count: 100), 1_500)
        close(fd)
        #expect(throws: StoreFileError.notADatabase(path: text)) { try SQLiteBackup.inspect(text, checkIntegrity: true) }

        let foreign = base + "/foreign.sqlite3"
        let other = try SQLiteConnection(path: foreign, role: .writer, synchronous: .full)
        try other.execute("CREATE TABLE t(x)")
        other.close()
        #expect(throws: StoreFileError.notATallyStore(path: foreign, reason: "it has no Tally schema version")) {
            try SQLiteBackup.inspect(foreign, checkIntegrity: false)
        }

        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...200)
        let path = base + "/" + SQLiteStore.fileName
        _ = try SQLiteBackup.copy(from: try #require(h.directory).path + "/" + SQLiteStore.fileName, to: path)
        let newer = base + "/newer.sqlite3"
        try copyFile(path, newer)
        let raw = try SQLiteConnection(path: newer, role: .checkpointer, synchronous: .full)
        try raw.execute("PRAGMA user_version = \(SQLiteSchema.latestVersion + 1)")
        raw.close()
        #expect(throws: StoreFileError.newerSchema(path: newer, found: SQLiteSchema.latestVersion + 1,
                                                   supported: SQLiteSchema.latestVersion)) {
            try SQLiteBackup.inspect(newer, checkIntegrity: false)
        }

        // Zeros over the second half of the file: b-tree pages of the
        // records and the log, which the quick check (or the count before
        // it) reads.
        let damaged = base + "/damaged.sqlite3"
        try copyFile(path, damaged)
        let size = try fileSize(damaged)
        let out = open(damaged, O_WRONLY)
        let start = size / 2 / 4_096 * 4_096
        let zeros = [UInt8](repeating: 0, count: Int(size - start))
        _ = zeros.withUnsafeBytes { pwrite(out, $0.baseAddress, $0.count, off_t(start)) }
        close(out)
        do {
            _ = try SQLiteBackup.inspect(damaged, checkIntegrity: true)
            Issue.record("a damaged store passed")
        } catch {
            switch error {
            case .damaged: break
            case .store(let failure) where failure.primaryCode == SQLITE_CORRUPT: break
            default: Issue.record("not reported as damaged: \(error)")
            }
        }
        #expect(try SQLiteBackup.inspect(path, checkIntegrity: true).headSeq == 200)
    }

    /// The restored copy goes on 2^32 past the backup, with its floor there
    /// and an empty log: every since a client holds is below the floor.
    @Test func markRestoredStartsANewStretchOfTheSequence() throws {
        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...5)
        try h.commit([.putRecord(record("r1", version: 2, seq: 6))], changes: [change(6, .record, "r1")],
                     idempotency: StoredIdempotency(key: "k", seq: 6, time: testNow, response: [1]))
        let target = try TemporaryDirectory(prefix: "tally-restore")
        let path = target.path + "/" + SQLiteStore.fileName
        _ = try SQLiteBackup.copy(from: try #require(h.directory).path + "/" + SQLiteStore.fileName, to: path)
        let jump = SQLiteBackup.restoreSeqJump
        #expect(jump == 4_294_967_296)
        let summary = try SQLiteBackup.markRestored(path, now: testNow)
        #expect(summary.headSeq == 6 + jump && summary.floorSeq == 6 + jump)
        #expect(summary.restoredHead == 6 && summary.recordCount == 5)

        let restored = try StoreHarness(.sqlite, directory: target)
        let state = try restored.reader.state()
        #expect(state.headSeq == 6 + jump && state.floorSeq == 6 + jump)
        #expect(state.changeCount == 0 && state.changeBytes == 0)
        #expect(try restored.reader.changes(after: 0, limit: 10).isEmpty)
        #expect(try restored.reader.record("r1")?.version == 2)
        #expect(try restored.reader.idempotency("k")?.response == [1])
        // The next commit takes the next seq after the jump.
        let outcome = try restored.commit([.putRecord(record("r7", seq: 7 + jump))], changes: [change(7 + jump, .record, "r7")])
        #expect(outcome.lastSeq == 7 + jump)
        #expect(try restored.reader.changes(after: 6 + jump, limit: 10).map(\.seq) == [7 + jump])
    }

    @Test func markRestoredRefusesToPassTheSeqsClientsCanCount() throws {
        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...1)
        let target = try TemporaryDirectory(prefix: "tally-restore")
        let path = target.path + "/" + SQLiteStore.fileName
        _ = try SQLiteBackup.copy(from: try #require(h.directory).path + "/" + SQLiteStore.fileName, to: path)
        let high = SQLiteBackup.maxClientSeq - SQLiteBackup.restoreSeqJump + 1
        let raw = try SQLiteConnection(path: path, role: .checkpointer, synchronous: .full)
        try raw.execute("UPDATE meta SET value = \(high) WHERE key = 'head_seq'")
        raw.close()
        #expect(throws: StoreFileError.sequenceExhausted(path: path, head: high)) {
            try SQLiteBackup.markRestored(path, now: testNow)
        }
        #expect(try SQLiteBackup.inspect(path, checkIntegrity: false).headSeq == high, "unchanged")
    }

    /// The files a killed hub leaves (database + WAL with every commit in
    /// it): folding puts the WAL's commits into the one file and removes it.
    @Test func foldWALKeepsEveryCommitInOneFile() throws {
        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...30)
        let source = try #require(h.directory).path + "/" + SQLiteStore.fileName
        let image = try TemporaryDirectory(prefix: "tally-fold")
        let path = image.path + "/" + SQLiteStore.fileName
        try copyFile(source, path)
        try copyFile(source + "-wal", path + "-wal")
        #expect(try fileSize(path + "-wal") > 0)

        try SQLiteBackup.foldWAL(path)
        #expect(access(path + "-wal", F_OK) != 0 && access(path + "-shm", F_OK) != 0)
        try expectConsistent(path, head: 30)
    }

    /// Leaving WAL mode needs the only connection: with a reader open (a
    /// hub, a backup) the store is refused, not half folded.
    @Test func foldWALRefusesAStoreSomeoneHasOpen() throws {
        let h = try StoreHarness(.sqlite)
        try commitNumbered(h, 1...3)
        let path = try #require(h.directory).path + "/" + SQLiteStore.fileName
        #expect(throws: StoreFileError.self) { try SQLiteBackup.foldWAL(path) }
        #expect(try h.reader.state().headSeq == 3)
        try commitNumbered(h, 4...4)
    }
}
