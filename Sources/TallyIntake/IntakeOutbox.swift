@preconcurrency import Glibc
import TallyProtocol
import TallySQLite

/// Why the intake outbox could not be read or written; the message names
/// the file and the operation.
public struct OutboxError: Error, SQLiteFailure {
    public var message: String
    public init(_ message: String) { self.message = message }
}

/// The persistent local outbox of intake jobs: an SQLite file with the jobs,
/// their stages and photos, and a directory beside it with the photos'
/// bytes under their SHA-256 (`outbox-photos/<sha256>`).
///
/// A stage is recorded as confirmed only after the hub has answered it, in
/// one transaction with the ids it returned; a process killed at any point
/// finds each stage either confirmed (with its ids) or still pending, and
/// the stage's idempotency key makes re-sending a pending stage safe.
public final class IntakeOutbox {
    public let path: String
    /// Where the photos' bytes are kept while their jobs are unfinished.
    public let photoDirectory: String
    /// Per-job lock files: one process runs a job at a time.
    public let lockDirectory: String
    private let db: SQLiteDatabase<OutboxError>

    /// 1: jobs, stages, photos. 2: the `analyzed` stage (after `upload`).
    static let schemaVersion: Int64 = 2

    /// What a job that had passed cover-set before its outbox knew the
    /// analyzed stage records for it.
    static let analyzedBeforeStage = #"{"stage":"media-uploaded","skipped":"the job passed this stage before tally waited for the analysis"}"#

    /// Opens (creating the file, its directory and the photo directory if
    /// needed) and brings the schema up to date.
    public init(path: String) throws(OutboxError) {
        self.path = path
        let directory = LocalDirectory.of(file: path)
        var stem = String(path.split(separator: "/").last ?? "outbox")
        if stem.hasSuffix(".sqlite") { stem.removeLast(7) }
        photoDirectory = "\(directory)/\(stem)-photos"
        lockDirectory = "\(directory)/\(stem)-locks"
        for made in [directory, photoDirectory, lockDirectory] { try LocalDirectory.create(made, as: OutboxError.self) }
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
            if version < 1 {
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
                    """)
            }
            if version < 2 {
                // Jobs written before the analyzed stage get it after their
                // upload stage: pending while cover-set is still to come (the
                // job waits for the analysis like a new one), else confirmed
                // as skipped.
                try db.execute("""
                    UPDATE stages SET position = position + 1
                    WHERE position > (SELECT u.position FROM stages u WHERE u.job = stages.job AND u.stage = 'upload')
                      AND NOT EXISTS (SELECT 1 FROM stages a WHERE a.job = stages.job AND a.stage = 'analyzed');
                    INSERT INTO stages(job, position, stage, status, result, updated)
                    SELECT u.job, u.position + 1, 'analyzed',
                           CASE WHEN c.status = 'confirmed' THEN 'confirmed' ELSE 'pending' END,
                           CASE WHEN c.status = 'confirmed' THEN '\(Self.analyzedBeforeStage)' END,
                           u.updated
                    FROM stages u LEFT JOIN stages c ON c.job = u.job AND c.stage = 'cover-set'
                    WHERE u.stage = 'upload'
                      AND NOT EXISTS (SELECT 1 FROM stages a WHERE a.job = u.job AND a.stage = 'analyzed');
                    """)
            }
            try db.execute("PRAGMA user_version = \(Self.schemaVersion);")
        }
    }

    // MARK: Jobs

    /// Stores a new job with all its stages pending, in one transaction.
    public func insert(_ job: IntakeJob) throws(OutboxError) {
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

    /// Copies the photos and stores the job, holding the outbox lock so no
    /// other process removes a photo file between the copy and the insert;
    /// returns the job with its run lock already held, so a concurrent
    /// `resume` cannot take it over before it starts.
    /// - Parameter duplicate: told the path of a photo with the same bytes
    ///   as an earlier one (kept once).
    public func createJob(hub: String, photos: [IntakePhotos.Checked], code: String?, location: String?,
                          gps: (lat: Double, lon: Double)?, receive: Int?,
                          duplicate: (String) -> Void = { _ in }) throws(OutboxError) -> (IntakeJob, OutboxLock) {
        let lock = try lockAll()
        defer { lock.release() }
        let id = IntakePhotos.randomHex(8)
        guard let jobLock = try lockJob(id) else {
            throw OutboxError("cannot lock the new intake job \(id)")
        }
        var stored: [IntakePhoto] = []
        for photo in photos {
            let (sha, size) = try IntakePhotos.copy(photo.path, into: photoDirectory)
            if stored.contains(where: { $0.sha256 == sha }) {
                duplicate(photo.path)
                continue
            }
            stored.append(IntakePhoto(position: stored.count, sha256: sha, size: size, type: photo.type,
                                      source: Self.absolute(photo.path), uploaded: false))
        }
        let now = Self.now()
        let job = IntakeJob(id: id, hub: hub, created: now, code: code, location: location, gps: gps,
                            receive: receive, item: code == nil ? "items/\(id)" : nil, newItem: code == nil,
                            state: .running, reason: nil, photos: stored,
                            stages: IntakeJob.stages(withCode: code != nil).map {
                                StageRecord(stage: $0, status: .pending, result: nil, updated: now)
                            })
        try insert(job)
        return (job, jobLock)
    }

    private static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        guard let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        return String(cString: cwd) + "/" + path
    }

    /// Every job (oldest first), or the one with this id.
    public func jobs(id: String? = nil) throws(OutboxError) -> [IntakeJob] {
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
    public func confirm(_ job: inout IntakeJob, _ stage: IntakeStage, result: JSONObject) throws(OutboxError) {
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

    /// Merges `accepted` into the analysis the job's analyzed stage
    /// recorded (after `tally intake accept`), so `status` shows it; a job
    /// without a recorded analysis is left as it is.
    public func recordAccepted(jobID: String, accepted: JSONObject) throws(OutboxError) {
        guard let job = try jobs(id: jobID).first,
              let index = job.stages.firstIndex(where: { $0.stage == .analyzed && $0.status == .confirmed }),
              var result = job.stages[index].result, case .object(var analysis)? = result["analysis"] else { return }
        analysis["accepted"] = .object(accepted)
        result["analysis"] = .object(analysis)
        try db.query("UPDATE stages SET result = ? WHERE job = ? AND stage = 'analyzed'",
                     [.text(JSONValue.object(result).serializedString), .text(jobID)])
    }

    /// Records that the hub stored one photo.
    public func markUploaded(_ job: inout IntakeJob, position: Int) throws(OutboxError) {
        try db.query("UPDATE photos SET uploaded = 1 WHERE job = ? AND position = ?",
                     [.text(job.id), .int(Int64(position))])
        if let index = job.photos.firstIndex(where: { $0.position == position }) { job.photos[index].uploaded = true }
    }

    /// Records the job's end: done, or failed at `stage` for `reason`.
    public func finish(_ job: inout IntakeJob, state: JobState, stage: IntakeStage? = nil, reason: String? = nil) throws(OutboxError) {
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
    public func photoPath(_ sha256: String) -> String { "\(photoDirectory)/\(sha256)" }

    /// Removes photo files no unfinished job needs, and temporary files
    /// left by a copy that was interrupted. Call holding `lockAll()`.
    public func removeUnneededPhotos() throws(OutboxError) {
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
    public func lockAll() throws(OutboxError) -> OutboxLock {
        guard let lock = try OutboxLock.acquire(path: "\(path).lock", wait: true) else {
            throw OutboxError("cannot lock the intake outbox '\(path)'")
        }
        return lock
    }

    /// The lock one process holds while it runs a job; nil when another
    /// process is running it right now.
    public func lockJob(_ id: String) throws(OutboxError) -> OutboxLock? {
        try OutboxLock.acquire(path: "\(lockDirectory)/\(id).lock", wait: false)
    }

    // MARK: Helpers

    public static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// An flock(2) lock on a file, released when closed or when the process
/// dies (a SIGKILLed run leaves no stale lock behind).
public final class OutboxLock {
    private var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    /// The lock; with `wait: false`, nil when another process holds it.
    public static func acquire(path: String, wait: Bool) throws(OutboxError) -> OutboxLock? {
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

    public func release() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { release() }
}
