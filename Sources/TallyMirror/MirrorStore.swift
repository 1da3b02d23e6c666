@preconcurrency import Glibc
import TallyClient
import TallyProtocol
import TallySQLite

/// Why the mirror's store could not be read or written; the message names
/// the file and what was being done.
public struct MirrorStoreError: Error, CustomStringConvertible, Sendable, SQLiteFailure {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The mirror's one SQLite file: the records and lists it mirrors, the
/// outbox of local writes, recorded conflicts, subscription resume points
/// and a little state (`meta`).
///
/// Every change to local state is one transaction: a push applied together
/// with the resume point it advances; a local write together with its
/// outbox entry; an entry's removal only after the hub's ok. A process
/// killed at any point (SIGKILL included) finds each of these either done
/// or not begun; idempotency keys make resending an entry safe.
///
/// Several processes open the same file (`mirror run` and `mirror set`
/// beside it); SQLite serialises their transactions. Each instance has one
/// owner thread or queue.
public final class MirrorStore: @unchecked Sendable {
    public let path: String
    let db: SQLiteDatabase<MirrorStoreError>
    static let schemaVersion: Int64 = 1

    public init(path: String) throws(MirrorStoreError) {
        self.path = path
        // Waits up to 30 s for another process's lock (a resync chunk commits in far less).
        db = try SQLiteDatabase(path: path, label: "mirror store", busyTimeoutMillis: 30_000)
        try migrate()
    }

    /// The store at `path` for a command: with `create`, made (with its
    /// directory) when missing; without, a missing store is an error that
    /// says how to start one.
    public static func open(_ path: String, create: Bool) throws(MirrorStoreError) -> MirrorStore {
        if !create, access(path, F_OK) != 0 {
            throw MirrorStoreError("no mirror store at \(path); start one with 'tally mirror run --store \(path) PATTERN…'")
        }
        if create { try LocalDirectory.create(LocalDirectory.of(file: path), as: MirrorStoreError.self) }
        return try MirrorStore(path: path)
    }

    private func migrate() throws(MirrorStoreError) {
        let version = try db.query("PRAGMA user_version").first?.first?.int ?? 0
        if version > Self.schemaVersion {
            throw MirrorStoreError("the mirror store '\(path)' was written by a newer tally (schema \(version)); upgrade tally")
        }
        guard version < Self.schemaVersion else { return }
        try db.transaction { () throws(MirrorStoreError) in
            try db.execute("""
                CREATE TABLE IF NOT EXISTS records(
                  name TEXT PRIMARY KEY, version INTEGER NOT NULL DEFAULT 0, seq INTEGER NOT NULL DEFAULT 0,
                  data TEXT, base TEXT, updated INTEGER NOT NULL DEFAULT 0);
                CREATE TABLE IF NOT EXISTS lists(
                  name TEXT PRIMARY KEY, version INTEGER NOT NULL, seq INTEGER NOT NULL,
                  entries TEXT NOT NULL, base TEXT);
                CREATE TABLE IF NOT EXISTS outbox(
                  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, op TEXT NOT NULL, idem TEXT NOT NULL UNIQUE,
                  base_version INTEGER NOT NULL, base TEXT, created INTEGER NOT NULL,
                  attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
                  plan TEXT, step INTEGER NOT NULL DEFAULT 0, revision INTEGER NOT NULL DEFAULT 0,
                  state TEXT NOT NULL DEFAULT 'pending');
                CREATE INDEX IF NOT EXISTS outbox_by_name ON outbox(name, id);
                CREATE TABLE IF NOT EXISTS conflicts(
                  id TEXT PRIMARY KEY, name TEXT NOT NULL, field TEXT NOT NULL, local TEXT, hub TEXT, base TEXT,
                  policy TEXT NOT NULL, created INTEGER NOT NULL, resolved TEXT);
                CREATE TABLE IF NOT EXISTS cursors(target TEXT PRIMARY KEY, seq INTEGER NOT NULL);
                CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
                PRAGMA user_version = \(Self.schemaVersion);
                """)
        }
    }

    public func transaction<R>(_ body: () throws(MirrorStoreError) -> R) throws(MirrorStoreError) -> R {
        try db.transaction(body)
    }

    /// Changes whenever another process commits to the file.
    public func dataVersion() throws(MirrorStoreError) -> Int64 { try db.dataVersion() }

    // MARK: Meta

    public func meta(_ key: String) throws(MirrorStoreError) -> String? {
        try db.query("SELECT value FROM meta WHERE key = ?", [.text(key)]).first?.first?.text
    }

    public func setMeta(_ values: [String: String?]) throws(MirrorStoreError) {
        try db.transaction { () throws(MirrorStoreError) in
            for (key, value) in values {
                try db.query("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                             [.text(key), SQLValue(value)])
            }
        }
    }

    /// The workflows last fetched from the hub, else the shipped ones.
    public func workflows() throws(MirrorStoreError) -> WorkflowCatalog {
        guard let text = try meta("workflows"), let value = try? JSONValue.parse(text),
              let catalog = WorkflowCatalog(json: value) else { return .shipped }
        return catalog
    }

    // MARK: Records and lists

    static let recordColumns = "name, version, seq, data, base, updated"

    public func record(_ name: String) throws(MirrorStoreError) -> MirrorRecord? {
        try db.query("SELECT \(Self.recordColumns) FROM records WHERE name = ?", [.text(name)]).first.map(Self.record(row:))
    }

    /// Records under `prefix` in name (byte) order; `withDeleted` includes
    /// rows whose local view is deleted.
    public func records(prefix: String, withDeleted: Bool = false) throws(MirrorStoreError) -> [MirrorRecord] {
        let deleted = withDeleted ? "" : "AND data IS NOT NULL"
        return try db.query("""
            SELECT \(Self.recordColumns) FROM records
            WHERE substr(CAST(name AS BLOB), 1, ?) = CAST(? AS BLOB) \(deleted) ORDER BY name
            """, [.int(Int64(prefix.utf8.count)), .text(prefix)]).map(Self.record(row:))
    }

    static func record(row: [SQLValue]) -> MirrorRecord {
        MirrorRecord(name: row[0].text ?? "", version: row[1].int ?? 0, seq: row[2].int ?? 0,
                     data: row[3].text.flatMap(Self.object), base: row[4].text.flatMap(Self.object), updated: row[5].int ?? 0)
    }

    func putRecord(_ record: MirrorRecord) throws(MirrorStoreError) {
        try db.query("""
            INSERT INTO records(name, version, seq, data, base, updated) VALUES(?,?,?,?,?,?)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq, data = excluded.data,
              base = excluded.base, updated = excluded.updated
            """, [.text(record.name), .int(record.version), .int(record.seq), SQLValue(record.data.map(Self.text)),
                  SQLValue(record.base.map(Self.text)), .int(Self.now())])
    }

    func removeRecord(_ name: String) throws(MirrorStoreError) {
        try db.query("DELETE FROM records WHERE name = ?", [.text(name)])
    }

    public func list(_ name: String) throws(MirrorStoreError) -> MirrorList? {
        try db.query("SELECT name, version, seq, entries FROM lists WHERE name = ?", [.text(name)]).first.map(Self.list(row:))
    }

    public func lists(prefix: String) throws(MirrorStoreError) -> [MirrorList] {
        try db.query("""
            SELECT name, version, seq, entries FROM lists
            WHERE substr(CAST(name AS BLOB), 1, ?) = CAST(? AS BLOB) ORDER BY name
            """, [.int(Int64(prefix.utf8.count)), .text(prefix)]).map(Self.list(row:))
    }

    static func list(row: [SQLValue]) -> MirrorList {
        let entries = row[3].text.flatMap { try? JSONValue.parse($0) }?.arrayValue?.compactMap(\.stringValue) ?? []
        return MirrorList(name: row[0].text ?? "", version: row[1].int ?? 0, seq: row[2].int ?? 0, entries: entries)
    }

    func putList(_ list: MirrorList) throws(MirrorStoreError) {
        let entries = JSONValue.array(list.entries.map(JSONValue.string)).serializedString
        try db.query("""
            INSERT INTO lists(name, version, seq, entries, base) VALUES(?,?,?,?,?)
            ON CONFLICT(name) DO UPDATE SET version = excluded.version, seq = excluded.seq,
              entries = excluded.entries, base = excluded.base
            """, [.text(list.name), .int(list.version), .int(list.seq), .text(entries), .text(entries)])
    }

    func removeList(_ name: String) throws(MirrorStoreError) {
        try db.query("DELETE FROM lists WHERE name = ?", [.text(name)])
    }

    // MARK: Outbox

    static let entryColumns = "id, name, op, idem, base_version, base, created, attempts, last_error, plan, step, revision, state"

    static func entry(row: [SQLValue]) -> OutboxEntry {
        let plan = row[9].text.flatMap { try? JSONValue.parse($0) }?.arrayValue?.compactMap(\.objectValue)
        return OutboxEntry(id: row[0].int ?? 0, name: row[1].text ?? "", op: row[2].text.flatMap(Self.object) ?? [:],
                           idem: row[3].text ?? "", baseVersion: row[4].int ?? 0, base: row[5].text.flatMap(Self.object),
                           created: row[6].int ?? 0, attempts: row[7].int ?? 0, lastError: row[8].text, plan: plan,
                           step: Int(row[10].int ?? 0), revision: Int(row[11].int ?? 0), state: row[12].text ?? "pending")
    }

    /// Pending entries in outbox order: all of one record's, or the next
    /// `limit` after `id` (ids only grow: AUTOINCREMENT never reuses the id
    /// of a removed entry, so "after the last one seen" finds every new one,
    /// sqlite.org/autoinc.html).
    public func pendingEntries(name: String) throws(MirrorStoreError) -> [OutboxEntry] {
        try db.query("SELECT \(Self.entryColumns) FROM outbox WHERE name = ? AND state = 'pending' ORDER BY id",
                     [.text(name)]).map(Self.entry(row:))
    }

    public func pendingEntries(after id: Int64, limit: Int) throws(MirrorStoreError) -> [OutboxEntry] {
        try db.query("SELECT \(Self.entryColumns) FROM outbox WHERE id > ? AND state = 'pending' ORDER BY id LIMIT ?",
                     [.int(id), .int(Int64(limit))]).map(Self.entry(row:))
    }

    public func failedEntries() throws(MirrorStoreError) -> [OutboxEntry] {
        try db.query("SELECT \(Self.entryColumns) FROM outbox WHERE state = 'failed' ORDER BY id").map(Self.entry(row:))
    }

    /// Writes waiting for the hub's ok.
    public func outboxDepth() throws(MirrorStoreError) -> Int64 {
        try db.query("SELECT count(*) FROM outbox WHERE state = 'pending'").first?.first?.int ?? 0
    }

    /// How many writes wait for the hub's ok, and the newest one's id.
    func pendingSummary() throws(MirrorStoreError) -> (count: Int, maxID: Int64) {
        let row = try db.query("SELECT count(*), max(id) FROM outbox WHERE state = 'pending'").first
        return (Int(row?[0].int ?? 0), row?[1].int ?? 0)
    }

    /// Whether writes to `name` wait in the outbox (its local view then
    /// differs from the hub's copy). One index lookup.
    func hasPending(_ name: String) throws(MirrorStoreError) -> Bool {
        try !db.query("SELECT 1 FROM outbox WHERE name = ? AND state = 'pending' LIMIT 1", [.text(name)]).isEmpty
    }

    @discardableResult
    func insertEntry(name: String, op: JSONObject, idem: String, baseVersion: Int64, base: JSONObject?) throws(MirrorStoreError) -> Int64 {
        try db.query("""
            INSERT INTO outbox(name, op, idem, base_version, base, created) VALUES(?,?,?,?,?,?)
            """, [.text(name), .text(Self.text(op)), .text(idem), .int(baseVersion), SQLValue(base.map(Self.text)), .int(Self.now())])
        return try db.query("SELECT last_insert_rowid()").first?.first?.int ?? 0
    }

    func hasEntry(idem: String) throws(MirrorStoreError) -> Bool {
        try !db.query("SELECT 1 FROM outbox WHERE idem = ?", [.text(idem)]).isEmpty
    }

    /// The local view of `name`: the hub's copy with the pending writes applied.
    func view(of name: String, over hub: JSONObject?, catalog: WorkflowCatalog) throws(MirrorStoreError) -> JSONObject? {
        let rule = catalog.rule(for: name)
        var view = hub
        for entry in try pendingEntries(name: name) {
            for write in entry.remainingWrites { view = LocalEffect.apply(write, to: view, rule: rule) }
        }
        return view
    }

    // MARK: Conflicts and cursors

    public func conflicts(includeResolved: Bool = false) throws(MirrorStoreError) -> [ConflictRecord] {
        try db.query("""
            SELECT id, name, field, local, hub, base, policy, created, resolved FROM conflicts
            \(includeResolved ? "" : "WHERE resolved IS NULL") ORDER BY created, id
            """).map(Self.conflict(row:))
    }

    public func conflict(_ id: String) throws(MirrorStoreError) -> ConflictRecord? {
        try db.query("SELECT id, name, field, local, hub, base, policy, created, resolved FROM conflicts WHERE id = ?",
                     [.text(id)]).first.map(Self.conflict(row:))
    }

    static func conflict(row: [SQLValue]) -> ConflictRecord {
        func value(_ v: SQLValue) -> JSONValue? { v.text.flatMap { try? JSONValue.parse($0) } }
        return ConflictRecord(id: row[0].text ?? "", name: row[1].text ?? "", field: row[2].text ?? "",
                              local: value(row[3]), hub: value(row[4]), base: value(row[5]), policy: row[6].text ?? "",
                              created: row[7].int ?? 0, resolved: row[8].text)
    }

    func insertConflict(_ conflict: ConflictRecord) throws(MirrorStoreError) {
        try db.query("""
            INSERT OR IGNORE INTO conflicts(id, name, field, local, hub, base, policy, created, resolved) VALUES(?,?,?,?,?,?,?,?,?)
            """, [.text(conflict.id), .text(conflict.name), .text(conflict.field),
                  SQLValue(conflict.local.map(\.serializedString)), SQLValue(conflict.hub.map(\.serializedString)),
                  SQLValue(conflict.base.map(\.serializedString)), .text(conflict.policy), .int(conflict.created),
                  SQLValue(conflict.resolved)])
    }

    /// Resume points by target key (`prefix:orders/`, `list:orders`, …).
    public func cursors() throws(MirrorStoreError) -> [String: Int64] {
        var cursors: [String: Int64] = [:]
        for row in try db.query("SELECT target, seq FROM cursors") {
            if let target = row[0].text, let seq = row[1].int { cursors[target] = seq }
        }
        return cursors
    }

    func setCursor(_ target: String, _ seq: Int64?) throws(MirrorStoreError) {
        if let seq {
            try db.query("INSERT INTO cursors(target, seq) VALUES(?, ?) ON CONFLICT(target) DO UPDATE SET seq = excluded.seq",
                         [.text(target), .int(seq)])
        } else {
            try db.query("DELETE FROM cursors WHERE target = ?", [.text(target)])
        }
    }

    // MARK: Helpers

    static func object(_ text: String) -> JSONObject? {
        (try? JSONValue.parse(text, limits: .stored))?.objectValue
    }

    static func text(_ object: JSONObject) -> String { JSONValue.object(object).serializedString }

    public static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// 128 random bits as hex: idempotency keys no other mirror will pick.
    static func randomKey() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef")
        return String((0..<32).map { _ in digits[Int(generator.next() % 16)] })
    }
}
