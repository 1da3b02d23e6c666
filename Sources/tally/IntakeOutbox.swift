@preconcurrency import Glibc
import TallyProtocol
import TallySQLite

/// Why the intake outbox could not be read or written; the message names
/// the file and the operation.
struct OutboxError: Error, SQLiteFailure {
    var message: String
    init(_ message: String) { self.message = message }
}

/// The persistent local outbox of intake jobs: an SQLite file with the jobs,
/// their stages and photos, and a directory beside it with the photos'
/// bytes under their SHA-256 (`outbox-photos/<sha256>`).
///
/// A stage is recorded as confirmed only after the hub has answered it, in
/// one transaction with the ids it returned; a process killed at any point
/// finds each stage either confirmed (with its ids) or still pending, and
/// the stage's idempotency key makes re-sending a pending stage safe.
final class IntakeOutbox {
    let path: String
    /// Where the photos' bytes are kept while their jobs are unfinished.
    let photoDirectory: String
    /// Per-job lock files: one process runs a job at a time.
    let lockDirectory: String
    private let db: SQLiteDatabase<OutboxError>

    static let schemaVersion: Int64 = 1

    /// `--outbox FILE`, else `$TALLY_OUTBOX`, else
    /// `$XDG_DATA_HOME/tally/outbox.sqlite`, else
    /// `~/.local/share/tally/outbox.sqlite` (the XDG base directory spec's
    /// default for user data).
    static func defaultPath(flag: String?) throws(UsageError) -> String {
        func env(_ name: String) -> String? {
            guard let value = getenv(name).map({ String(cString: $0) }), !value.isEmpty else { return nil }
            return value
        }
        if let flag {
            guard !flag.isEmpty else { throw UsageError(message: "--outbox needs a file name") }
            return flag
        }
        if let file = env("TALLY_OUTBOX") { return file }
        if let data = env("XDG_DATA_HOME") { return "\(data)/tally/outbox.sqlite" }
        guard let home = env("HOME") else {
            throw UsageError(message: "cannot place the intake outbox: HOME is not set; use --outbox FILE or TALLY_OUTBOX")
        }
        return "\(home)/.local/share/tally/outbox.sqlite"
    }

    /// Opens (creating the file, its directory and the photo directory if
    /// needed) and brings the schema up to date.
    init(path: String) throws(OutboxError) {
        self.path = path
        let directory = Self.directory(of: path)
        var stem = String(path.split(separator: "/").last ?? "outbox")
        if stem.hasSuffix(".sqlite") { stem.removeLast(7) }
        photoDirectory = "\(directory)/\(stem)-photos"
        lockDirectory = "\(directory)/\(stem)-locks"
        try Self.makeDirectories(directory)
        try Self.makeDirectories(photoDirectory)
        try Self.makeDirectories(lockDirectory)
        // Another tally process may hold the write lock for a moment.
        db = try SQLiteDatabase(path: path, label: "intake outbox", busyTimeoutMillis: 10_000)
        try migrate()
    }

    private func migrate() throws(OutboxError) {
        let version = try db.query("PRAGMA user_version").first?.first?.int ?? 0
        if version > Self.schemaVersion {
            throw OutboxError("the intake outbox '\(path)' was written by a newer tally (schema \(version)); upgrade tally")
        }
        guard version < Self.schemaVersion else { return }
        try db.transaction { () throws(OutboxError) in
            try db.execute("""
                CREATE TABLE jobs(
                  id TEXT PRIMARY KEY, hub TEXT NOT NULL, created INTEGER NOT NULL,
                  code TEXT, location TEXT, lat REAL, lon REAL, receive INTEGER,
                  item TEXT, new_item INTEGER NOT NULL DEFAULT 0,
                  state TEXT NOT NULL, reason TEXT);
                CREATE TABLE stages(
                  job TEXT NOT NULL, position INTEGER NOT NULL, stage TEXT NOT NULL,
                  status TEXT NOT NULL, result TEXT, updated INTEGER NOT NULL,
                  PRIMARY KEY(job, stage));
                CREATE TABLE photos(
                  job TEXT NOT NULL, position INTEGER NOT NULL, sha256 TEXT NOT NULL,
                  size INTEGER NOT NULL, type TEXT NOT NULL, source TEXT NOT NULL,
                  uploaded INTEGER NOT NULL DEFAULT 0,
                  PRIMARY KEY(job, position));
                PRAGMA user_version = \(Self.schemaVersion);
                """)
        }
    }

    // MARK: Jobs

    /// Stores a new job with all its stages pending, in one transaction.
    func insert(_ job: IntakeJob) throws(OutboxError) {
        try db.transaction { () throws(OutboxError) in
            try db.query("""
                INSERT INTO jobs(id, hub, created, code, location, lat, lon, receive, item, new_item, state, reason)
                VALUES(?,?,?,?,?,?,?,?,?,?,?,?)
                """, [.text(job.id), .text(job.hub), .int(job.created), SQLValue(job.code), SQLValue(job.location),
                      job.gps.map { .real($0.lat) } ?? .null, job.gps.map { .real($0.lon) } ?? .null,
                      SQLValue(job.receive), SQLValue(job.item), .int(job.newItem ? 1 : 0),
                      .text(job.state.rawValue), SQLValue(job.reason)])
            for (position, row) in job.stages.enumerated() {
                try db.query("INSERT INTO stages(job, position, stage, status, result, updated) VALUES(?,?,?,?,?,?)",
                             [.text(job.id), .int(Int64(position)), .text(row.stage.rawValue),
                              .text(row.status.rawValue), .null, .int(row.updated)])
            }
            for photo in job.photos {
                try db.query("INSERT INTO photos(job, position, sha256, size, type, source, uploaded) VALUES(?,?,?,?,?,?,?)",
                             [.text(job.id), .int(Int64(photo.position)), .text(photo.sha256), .int(Int64(photo.size)),
                              .text(photo.type), .text(photo.source), .int(photo.uploaded ? 1 : 0)])
            }
        }
    }

    /// Every job (oldest first), or the one with this id.
    func jobs(id: String? = nil) throws(OutboxError) -> [IntakeJob] {
        let rows = try db.query("""
            SELECT id, hub, created, code, location, lat, lon, receive, item, new_item, state, reason
            FROM jobs \(id == nil ? "" : "WHERE id = ?") ORDER BY created, id
            """, id.map { [.text($0)] } ?? [])
        var jobs: [IntakeJob] = []
        for row in rows {
            guard let jobID = row[0].text, let hub = row[1].text, let stateText = row[10].text,
                  let state = JobState(rawValue: stateText) else {
                throw OutboxError("the intake outbox '\(path)' has a damaged job row")
            }
            var job = IntakeJob(id: jobID, hub: hub, created: row[2].int ?? 0, code: row[3].text,
                                location: row[4].text, gps: nil, receive: row[7].int.map { Int($0) },
                                item: row[8].text, newItem: row[9].int == 1, state: state,
                                reason: row[11].text, photos: [], stages: [])
            if let lat = row[5].real, let lon = row[6].real { job.gps = (lat, lon) }
            for stageRow in try db.query("SELECT stage, status, result, updated FROM stages WHERE job = ? ORDER BY position",
                                         [.text(jobID)]) {
                guard let stage = stageRow[0].text.flatMap(IntakeStage.init(rawValue:)),
                      let status = stageRow[1].text.flatMap(StageStatus.init(rawValue:)) else {
                    throw OutboxError("the intake outbox '\(path)' has a damaged stage row for job \(jobID)")
                }
                let result = stageRow[2].text.flatMap { try? JSONValue.parse($0) }?.objectValue
                job.stages.append(StageRecord(stage: stage, status: status, result: result, updated: stageRow[3].int ?? 0))
            }
            for photoRow in try db.query("""
                SELECT position, sha256, size, type, source, uploaded FROM photos WHERE job = ? ORDER BY position
                """, [.text(jobID)]) {
                guard let position = photoRow[0].int, let sha = photoRow[1].text, let size = photoRow[2].int,
                      let type = photoRow[3].text else {
                    throw OutboxError("the intake outbox '\(path)' has a damaged photo row for job \(jobID)")
                }
                job.photos.append(IntakePhoto(position: Int(position), sha256: sha, size: Int(size), type: type,
                                              source: photoRow[4].text ?? "", uploaded: photoRow[5].int == 1))
            }
            jobs.append(job)
        }
        return jobs
    }

    /// Records a stage the hub confirmed, with what it returned, and (after
    /// the resolve stage) which item the job is for: one transaction.
    func confirm(_ job: inout IntakeJob, _ stage: IntakeStage, result: JSONObject) throws(OutboxError) {
        let now = Self.now()
        let (id, item, newItem) = (job.id, job.item, job.newItem)
        try db.transaction { () throws(OutboxError) in
            try db.query("UPDATE stages SET status = 'confirmed', result = ?, updated = ? WHERE job = ? AND stage = ?",
                         [.text(JSONValue.object(result).serializedString), .int(now), .text(id), .text(stage.rawValue)])
            try db.query("UPDATE jobs SET item = ?, new_item = ? WHERE id = ?",
                         [SQLValue(item), .int(newItem ? 1 : 0), .text(id)])
        }
        if let index = job.stages.firstIndex(where: { $0.stage == stage }) {
            job.stages[index].status = .confirmed
            job.stages[index].result = result
            job.stages[index].updated = now
        }
    }

    /// Records that the hub stored one photo.
    func markUploaded(_ job: inout IntakeJob, position: Int) throws(OutboxError) {
        try db.query("UPDATE photos SET uploaded = 1 WHERE job = ? AND position = ?",
                     [.text(job.id), .int(Int64(position))])
        if let index = job.photos.firstIndex(where: { $0.position == position }) { job.photos[index].uploaded = true }
    }

    /// Records the job's end: done, or failed at `stage` for `reason`.
    func finish(_ job: inout IntakeJob, state: JobState, stage: IntakeStage? = nil, reason: String? = nil) throws(OutboxError) {
        let now = Self.now()
        let id = job.id
        try db.transaction { () throws(OutboxError) in
            try db.query("UPDATE jobs SET state = ?, reason = ? WHERE id = ?",
                         [.text(state.rawValue), SQLValue(reason), .text(id)])
            if let stage {
                try db.query("UPDATE stages SET status = 'failed', updated = ? WHERE job = ? AND stage = ?",
                             [.int(now), .text(id), .text(stage.rawValue)])
            }
        }
        job.state = state
        job.reason = reason
        if let stage, let index = job.stages.firstIndex(where: { $0.stage == stage }) {
            job.stages[index].status = .failed
            job.stages[index].updated = now
        }
    }

    /// The photo file of a SHA-256.
    func photoPath(_ sha256: String) -> String { "\(photoDirectory)/\(sha256)" }

    /// Removes photo files no unfinished job needs, and temporary files
    /// left by a copy that was interrupted. Call holding `lockAll()`.
    func removeUnneededPhotos() throws(OutboxError) {
        let needed = Set(try db.query("""
            SELECT DISTINCT photos.sha256 FROM photos JOIN jobs ON jobs.id = photos.job WHERE jobs.state = 'running'
            """).compactMap { $0.first?.text })
        guard let directory = opendir(photoDirectory) else { return }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name != ".", name != "..", !needed.contains(name) else { continue }
            unlink("\(photoDirectory)/\(name)")
        }
    }

    // MARK: Locks

    /// An exclusive lock on the whole outbox, for adding a job's photos and
    /// rows and for removing photos: short sections only. Waits for it.
    func lockAll() throws(OutboxError) -> OutboxLock {
        guard let lock = try OutboxLock.acquire(path: "\(path).lock", wait: true) else {
            throw OutboxError("cannot lock the intake outbox '\(path)'")
        }
        return lock
    }

    /// The lock one process holds while it runs a job; nil when another
    /// process is running it right now.
    func lockJob(_ id: String) throws(OutboxError) -> OutboxLock? {
        try OutboxLock.acquire(path: "\(lockDirectory)/\(id).lock", wait: false)
    }

    // MARK: Helpers

    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// mkdir -p, private to the user (0700): the photos are theirs.
    static func makeDirectories(_ path: String) throws(OutboxError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            if mkdir(current, 0o700) != 0, errno != EEXIST {
                throw OutboxError("cannot create the directory '\(current)': \(String(cString: strerror(errno)))")
            }
        }
    }
}

/// An flock(2) lock on a file, released when closed or when the process
/// dies (a SIGKILLed run leaves no stale lock behind).
final class OutboxLock {
    private var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    /// The lock; with `wait: false`, nil when another process holds it.
    static func acquire(path: String, wait: Bool) throws(OutboxError) -> OutboxLock? {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw OutboxError("cannot open the lock file '\(path)': \(String(cString: strerror(errno)))") }
        while flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0 {
            if errno == EINTR { continue }
            let busy = errno == EWOULDBLOCK
            let reason = String(cString: strerror(errno))
            close(fd)
            if busy { return nil }
            throw OutboxError("cannot lock '\(path)': \(reason)")
        }
        return OutboxLock(fd: fd)
    }

    func release() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { release() }
}
