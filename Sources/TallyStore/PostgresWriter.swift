@preconcurrency import Glibc
import CSQLite
import TallyConcurrency
import TallyPostgres
import TallyProtocol

/// The PostgreSQL store's write connection and what the writer thread does
/// with it: each group of units in one transaction, the head row moved and
/// checked in it, one NOTIFY per group, retention in small transactions.
///
/// Created on the opening thread (so that opening errors reach the caller),
/// then used by one thread at a time, as `CommitBackend` requires — libpq:
/// "no two threads attempt to manipulate the same PGconn object at the same
/// time".
///
/// # The head row
///
/// A group starts by locking `tally_head` (`SELECT … FOR UPDATE`) and
/// checking it against the head its seqs follow: the first change's seq
/// minus one (the hub numbered them after the last change it knew of, its
/// own or another hub's), or the head this writer last committed for a
/// group without changes. The lock holds to COMMIT, so group commits of
/// several hubs on one database wait for each other in the order they
/// reach the row, and seqs are numbered in commit order (a sequence's
/// `nextval` would not be: its values are taken before commit). A head
/// that is not the expected one means another hub committed first: the
/// group is rolled back before any of its statements ran and fails with
/// `StoreError.isHeadMoved`, naming both heads; the hub catches up and
/// numbers its work again. The group's last statement moves the row with
/// `UPDATE tally_head SET seq = $last WHERE seq = $expected`.
final class PostgresWriter: CommitBackend {
    /// The NOTIFY channel; the payload is the group's last seq.
    static let channel = "tally_changes"

    /// Serialization failures and deadlocks are retried this many times.
    static let maxBusyAttempts = 10

    let connection: PostgresConnection
    let diagnostics: LockedValueBox<StoreDiagnostics>
    private let hooks: StoreTestHooks
    private let listWrites: PostgresListWrites
    var policy: RetentionPolicy
    var meta: SQLiteWriter.Meta
    /// While the head row is held for the next group (see `heldMillis`):
    /// the head found, which that group must follow.
    private var heldHead: Int64?

    /// A group that found another hub's head keeps the head row locked
    /// (its transaction open) for the next group, which the hub builds on
    /// that head once it has caught up: that group then cannot lose to a
    /// third hub's commit as well. Without the hold, a hub among busy ones
    /// could lose race after race (measured: p99 of acknowledgements 319 ms
    /// with three hubs). Other hubs wait meanwhile, so the hold is short.
    static let holdMillis = 50

    var heldMillis: Int? { heldHead == nil ? nil : Self.holdMillis }

    func releaseHold() {
        guard heldHead != nil else { return }
        heldHead = nil
        rollBack()
    }

    /// The group whose COMMIT is on its way, while it is (see `recover`):
    /// the head it moved from, the meta after it, and its last change.
    private var commitSent: SentGroup?

    private struct SentGroup {
        var expected: Int64
        var next: SQLiteWriter.Meta
        var lastChange: StoredChange?
    }

    /// The head of this writer's last commit, for the head watcher: the
    /// notifications of its own groups are no news to the hub.
    let committedHead: LockedValueBox<Int64>

    init(connection: PostgresConnection, diagnostics: LockedValueBox<StoreDiagnostics>,
         retention: StoreRetention, clock: StoreClock, hooks: StoreTestHooks,
         committedHead: LockedValueBox<Int64>) throws(StoreError) {
        self.connection = connection
        self.diagnostics = diagnostics
        self.committedHead = committedHead
        self.hooks = hooks
        listWrites = PostgresListWrites(blockSize: hooks.listBlockSize ?? SQLiteListWrites.defaultBlockSize)
        policy = RetentionPolicy(retention: retention, clock: clock)
        meta = try Self.readMeta(connection)
    }

    static func readMeta(_ connection: PostgresConnection) throws(StoreError) -> SQLiteWriter.Meta {
        do throws(PostgresError) {
            let row = try connection.execute(Statements.readMeta).firstRow()
            return SQLiteWriter.Meta(head: try row.int64(0), floor: try row.int64(1), changeCount: try row.int64(2),
                                     changeBytes: try row.int64(3))
        } catch {
            throw StoreError(error)
        }
    }

    var headSeq: Int64 { meta.head }

    // MARK: Lifecycle

    func willRun() {}

    func finish() {
        connection.close()
    }

    // MARK: Commits

    /// `waitForLocks` is ignored: nothing borrows this backend (the store
    /// does not commit in place), so every call comes from the writer.
    ///
    /// The group's changes go in with its head row, in one statement; when
    /// that statement finds a seq already in the log, the group is applied
    /// again with one INSERT per change, so that the unit at fault is known.
    ///
    /// A connection lost during the group (a server restart, a terminated
    /// session) is no unit's fault: the writer reconnects and tries the
    /// group once more. Lost before COMMIT was sent, nothing was committed.
    /// Lost while waiting for COMMIT's answer, the head row tells: at the
    /// group's last seq, it committed; still at the old head, it did not.
    func apply(_ units: ArraySlice<StoreUnit>, waitForLocks: Bool) -> ApplyResult {
        var attempt = 1
        var batchingChanges = true
        var reconnected = false
        while true {
            let result = applyOnce(units, batchingChanges: batchingChanges)
            let sent = commitSent
            commitSent = nil
            guard case .failed(let index, let error) = result else { return result }
            if !connection.isConnected && !reconnected {
                reconnected = true
                switch recover(sent: sent) {
                case .retry: continue
                case .committed(let lastSeq): return .committed(lastSeq: lastSeq)
                case .failed(let error): return .failed(unitIndex: nil, error)
                }
            }
            guard index == nil else { return result }
            if batchingChanges && error.isConstraintViolation {
                batchingChanges = false
                continue
            }
            if error.isBusy, !error.isHeadMoved, attempt < Self.maxBusyAttempts {
                attempt += 1
                usleep(1_000)
                continue
            }
            return result
        }
    }

    private enum Recovery {
        case retry
        case committed(lastSeq: Int64)
        case failed(StoreError)
    }

    /// A head behind the one the group follows: the database lost commits
    /// this hub had made or applied (restored from a backup, or a standby
    /// promoted that had not received them), and clients may hold seqs up
    /// to `expected` that the store will hand out again. As a restore of a
    /// hub's own store does, the head (and the log's floor, so that every
    /// resume resnapshots) moves 2^32 past `expected`, with the lock still
    /// held, so that no seq a client saw is used again; the group fails as
    /// a head moved, and the hub starts over at the new head.
    private func moveOnFromLostHead(found: Int64, expected: Int64) -> StoreError {
        let jumped = expected + Self.lostHeadJump
        do throws(PostgresError) {
            let results = try connection.pipeline([
                .statement(Statements.jumpHead, [.int8(jumped), .int8(found), .text(Self.channel)]),
                .command("COMMIT"),
            ])
            guard results[1].commandStatus == "COMMIT" else {
                throw PostgresError(kind: .server, sqlState: "25P02",
                                    message: "the server rolled the transaction back (\(results[1].commandStatus))",
                                    operation: "commit")
            }
            meta.head = jumped
            meta.floor = jumped
            return .headMoved(found: jumped, expected: expected)
        } catch {
            rollBack()
            return StoreError(error)
        }
    }

    /// How far a lost head moves on: as `SQLiteBackup`'s restore, more than
    /// a hub writes between backups and far below 2^53.
    static let lostHeadJump: Int64 = 1 << 32

    /// After a lost connection: reconnect, and find out whether a group
    /// whose COMMIT was sent committed. Its last change in the log, byte for
    /// byte, says so even when other hubs have committed since; a group
    /// without changes is known only while the head is where it left it.
    private func recover(sent: SentGroup?) -> Recovery {
        do throws(PostgresError) {
            try connection.reconnect()
            guard let sent else { return .retry }
            if let last = sent.lastChange {
                let rows = try connection.execute(Statements.changeMessage, [.int8(last.seq)])
                if let row = rows.first, try row.bytes(0) == last.message {
                    meta = sent.next
                    return .committed(lastSeq: last.seq)
                }
                let head = try connection.execute(Statements.readHead).firstRow().int64(0)
                if head == sent.expected { return .retry }
                return .failed(.headMoved(found: head, expected: sent.expected))
            }
            let head = try connection.execute(Statements.readHead).firstRow().int64(0)
            if head == sent.expected { return .retry }
            return .failed(StoreError(code: SQLITE_IOERR,
                                      message: "the connection was lost at COMMIT and the head (\(head)) does not tell whether the group committed",
                                      operation: "commit"))
        } catch {
            return .failed(StoreError(error))
        }
    }

    private func applyOnce(_ units: ArraySlice<StoreUnit>, batchingChanges: Bool) -> ApplyResult {
        if !connection.isConnected {
            // A connection lost in an earlier group: try once per group, and
            // fail this one if the server is still away.
            do throws(PostgresError) {
                try connection.reconnect()
            } catch {
                return .failed(unitIndex: nil, StoreError(error))
            }
        }
        // The head the group's seqs follow: the hub numbered them after
        // the last change it knows of, its own or another hub's.
        var base = meta
        if let first = units.lazy.compactMap({ $0.changes.first?.seq }).first { base.head = first - 1 }
        let held = heldHead
        heldHead = nil
        if let held, held != base.head || !connection.inTransaction {
            // Not the group the hold was for: start afresh.
            rollBack()
        }
        if held != base.head || !connection.inTransaction {
            do throws(PostgresError) {
                // BEGIN and the lock in one round trip.
                let begun = try connection.pipeline([.command("BEGIN"), .statement(Statements.lockHead, [])])
                let found = try begun[1].firstRow().int64(0)
                guard found == base.head else {
                    if found > base.head {
                        heldHead = found
                        return .failed(unitIndex: nil, .headMoved(found: found, expected: base.head))
                    }
                    return .failed(unitIndex: nil, moveOnFromLostHead(found: found, expected: base.head))
                }
            } catch {
                rollBack()
                return .failed(unitIndex: nil, StoreError(error))
            }
        }
        var next = base
        var changes = ChangeColumns()
        for index in units.indices {
            do throws(StoreError) {
                try apply(units[index], to: &next, changes: &changes, batching: batchingChanges)
            } catch {
                rollBack()
                return .failed(unitIndex: error.isBusy ? nil : index, error)
            }
        }
        do throws(StoreError) {
            if let hook = hooks.beforeCommit { hook(units.map(\.token)) }
            if let error = hooks.failCommit?(units.map(\.token)) { throw error }
            commitSent = SentGroup(expected: base.head, next: next,
                                   lastChange: units.last(where: { !$0.changes.isEmpty })?.changes.last)
            try recordAndCommit(changes, from: base, to: &next)
        } catch {
            rollBack()
            return .failed(unitIndex: nil, error)
        }
        meta = next
        let head = meta.head
        committedHead.withLock { $0 = max($0, head) }
        return .committed(lastSeq: meta.head)
    }

    /// What a group gathers for its closing statement: the changes for
    /// one set-based INSERT, and the rows `PostgresGroupWrites` batches.
    struct ChangeColumns {
        var rows = PostgresGroupWrites()
        var seqs: [Int64] = []
        var times: [Int64] = []
        var kinds: [Int64] = []
        var names: [[UInt8]] = []
        var messages: [[UInt8]] = []
        /// `StoredRecord.priorBytes`, empty for none.
        var priors: [[UInt8]] = []
    }

    /// One statement ends every group, sent with the COMMIT in one round
    /// trip: it moves the head row from the head the group follows,
    /// inserts the changes gathered, counts them in the meta row and
    /// notifies — one round trip instead of one per change. The head row
    /// is moved even when the group adds no change. `next` takes the meta
    /// row's counts as they are after the group (other hubs' groups and
    /// pruning move them too).
    private func recordAndCommit(_ changes: ChangeColumns, from current: SQLiteWriter.Meta,
                                 to next: inout SQLiteWriter.Meta) throws(StoreError) {
        // A notification only for a group that added changes, delivered at
        // COMMIT ("if a NOTIFY is executed inside a transaction, the notify
        // events are not delivered until and unless the transaction is committed").
        let results: [PostgresResult]
        do throws(PostgresError) {
            results = try connection.pipeline([
                .statement(Statements.recordGroup, [
                    .int8(next.head), .int8(current.head),
                    .int8Array(changes.seqs), .int8Array(changes.times), .int8Array(changes.kinds),
                    .byteaArray(changes.names), .byteaArray(changes.messages),
                    .int8(next.changeCount - current.changeCount), .int8(next.changeBytes - current.changeBytes),
                    .bool(next.head != current.head), .text(Self.channel), .byteaArray(changes.priors),
                ] + changes.rows.parameters),
                .command("COMMIT"),
            ])
        } catch {
            // The head row was not where the group expected it (the lock
            // taken at BEGIN makes that a bug elsewhere, not a race).
            guard error.sqlState == "22012" else { throw StoreError(error) }
            rollBack()
            let found = try run { () throws(PostgresError) in
                try connection.execute(Statements.readHead).firstRow().int64(0)
            }
            throw StoreError.headMoved(found: found, expected: current.head)
        }
        guard results[1].commandStatus == "COMMIT" else {
            throw StoreError(PostgresError(kind: .server, sqlState: "25P02",
                                           message: "the server rolled the transaction back (\(results[1].commandStatus))",
                                           operation: "commit"))
        }
        try run { () throws(PostgresError) in
            let row = try results[0].firstRow()
            next.floor = try row.int64(2)
            next.changeCount = try row.int64(3)
            next.changeBytes = try row.int64(4)
        }
    }

    /// Applies a unit's mutations; its changes, record and index rows and
    /// idempotency answer go to `changes` when `batching`, else are written
    /// one by one (so that a duplicate seq names its unit).
    private func apply(_ unit: StoreUnit, to next: inout SQLiteWriter.Meta, changes: inout ChangeColumns,
                       batching: Bool) throws(StoreError) {
        let c = connection
        for index in unit.mutations.indices {
            if batching, changes.rows.take(unit.mutations[index]) {
                if let error = hooks.afterMutation?(unit.token, index) { throw error }
                continue
            }
            try run { () throws(PostgresError) in
                switch unit.mutations[index] {
                case .putRecord(let r):
                    try c.execute(Statements.upsertRecord, [.bytea(Array(r.name.utf8)), .int8(r.version), .int8(r.seq),
                                                            .int8(r.created), .int8(r.updated), .bytea(r.data)])
                case .deleteRecord(let name):
                    try c.execute(Statements.deleteRecord, [.bytea(Array(name.utf8))])
                case .putList(let l):
                    try c.execute(Statements.upsertList, [.bytea(Array(l.name.utf8)), .int8(l.version), .int8(l.seq),
                                                          .int8(l.created), .int8(l.updated), .int8(l.count)])
                case .deleteList(let name):
                    try c.execute(Statements.deleteList, [.bytea(Array(name.utf8))])
                    try listWrites.clear(c, Array(name.utf8))
                case .insertListEntry(let list, let row):
                    try listWrites.insert(c, Array(list.utf8), row)
                case .deleteListEntries(let list, let keys):
                    try listWrites.delete(c, Array(list.utf8), keys)
                case .clearListEntries(let list):
                    try listWrites.clear(c, Array(list.utf8))
                case .putIndexEntry(let e):
                    try c.execute(Statements.upsertIndexEntry, [.bytea(Array(e.index.utf8)), .bytea(e.value),
                                                                .bytea(Array(e.name.utf8)), .int8(e.updated)])
                case .deleteIndexEntry(let index, let value, let name):
                    try c.execute(Statements.deleteIndexEntry, [.bytea(Array(index.utf8)), .bytea(value),
                                                                .bytea(Array(name.utf8))])
                case .markIndexBuilt(let index):
                    try c.execute(Statements.markIndexBuilt, [.bytea(Array(index.utf8))])
                case .dropIndex(let index):
                    try c.execute(Statements.dropIndexRows, [.bytea(Array(index.utf8))])
                    try c.execute(Statements.dropIndexMark, [.bytea(Array(index.utf8))])
                }
            }
            if let error = hooks.afterMutation?(unit.token, index) { throw error }
        }
        for change in unit.changes {
            if batching {
                changes.seqs.append(change.seq)
                changes.times.append(change.time)
                changes.kinds.append(change.kind.storedValue)
                changes.names.append(Array(change.name.utf8))
                changes.messages.append(change.message)
                changes.priors.append(change.prior?.priorBytes ?? [])
            } else {
                try run { () throws(PostgresError) in
                    try c.execute(Statements.insertChange, [.int8(change.seq), .int8(change.time),
                                                            .int8(change.kind.storedValue),
                                                            .bytea(Array(change.name.utf8)), .bytea(change.message),
                                                            PostgresValue(bytes: change.prior?.priorBytes)])
                }
            }
            next.head = max(next.head, change.seq)
            next.changeCount += 1
            next.changeBytes += Int64(change.message.count)
        }
        if let i = unit.idempotency, batching {
            changes.rows.remember(i)
        } else if let i = unit.idempotency {
            try run { () throws(PostgresError) in
                try c.execute(Statements.upsertIdempotency, [.bytea(Array(i.key.utf8)), .int8(i.seq), .int8(i.time),
                                                             .bytea(i.response)])
            }
        }
    }

    /// Runs `body`, turning a PostgreSQL failure into a `StoreError`.
    @discardableResult
    func run<R>(_ body: () throws(PostgresError) -> R) throws(StoreError) -> R {
        do throws(PostgresError) {
            return try body()
        } catch {
            throw StoreError(error)
        }
    }

    /// Ends a failed transaction; a failure here changes nothing for the
    /// caller, who already has an error (and a lost connection rolls back
    /// by itself: the server ends the session's transaction).
    func rollBack() {
        guard connection.isConnected, connection.inTransaction else { return }
        try? connection.execute(script: "ROLLBACK")
    }
}
