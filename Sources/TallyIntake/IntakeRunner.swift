@preconcurrency import Glibc
import TallyClient
import TallyHTTP
import TallyProtocol

/// Runs intake jobs stage by stage against one hub, recording each stage
/// in the outbox once the hub has confirmed it.
///
/// A stage is: build the request from the job (`IntakeRequests`), send it
/// with its idempotency key, and on success record what came back. A crash
/// after the hub applied a stage and before the outbox recorded it is
/// harmless: the resumed run sends the same request with the same key and
/// the hub answers with its first reply. When the key is gone (keys live 24
/// hours) the advance is refused as a conflict or illegal transition; the
/// runner then reads the record, and a record already at or past the
/// stage's target confirms the stage.
public final class IntakeRunner {
    public enum Outcome {
        case done
        /// The hub refused for a reason no retry can fix; the job is failed.
        case failed(String)
        /// The hub could not be reached or asked to come back later; the
        /// job stays resumable.
        case interrupted(HubError)
    }

    /// How a stage went wrong: worth retrying later, or not.
    enum StageError: Error {
        case transient(HubError)
        case permanent(String)
        /// Someone marked the record failed on the hub: the job ends too.
        case failedOnHub(String)
        /// The outbox could not record what the hub confirmed (the local
        /// disk): the job stays as it was, resumable once that is fixed.
        case local(OutboxError)
    }

    /// A stop asked for at a checkpoint: the stage ends there as if the
    /// connection had dropped, and the job stays resumable.
    public struct Interruption: Error {
        public init() {}
    }

    public let outbox: IntakeOutbox
    public let access: HubAccess
    let http: RESTClient
    private var hub: BlockingTallyClient?
    /// Stage lines and upload progress (off with --quiet).
    public var verbose = true
    /// Where stage lines go (`tally: …` on stderr in the CLI).
    public var log: (String) -> Void = { _ in }
    /// Where photo upload and analysis progress goes (a bar on stderr in the CLI).
    public var onUpload: (PhotoUploadEvent) -> Void = { _ in }
    /// How long the analyzed stage waits for the hub to analyse the photos
    /// (`--analysis-wait`); then the job goes on from media-uploaded.
    public var analysisWaitMillis: Int64 = IntakeRunner.defaultAnalysisWaitMillis
    public static let defaultAnalysisWaitMillis: Int64 = 60_000
    /// Milliseconds, monotonic: the analysis wait's clock.
    public var clock: () -> Int64 = PhotoUploadDisplay.monotonicMillis
    /// Called at every point a crash can leave the job at (`create:sent`,
    /// `upload:2`, `done:confirmed`, …): the CLI's `TALLY_INTAKE_CRASH_AT`
    /// kills the process there; tests throw `Interruption` to stop there.
    public var checkpoint: (String) throws(Interruption) -> Void = { _ in }

    public init(outbox: IntakeOutbox, access: HubAccess) {
        self.outbox = outbox
        self.access = access
        self.http = RESTClient(access: access)
    }

    deinit { hub?.close() }

    /// A checkpoint; a stop asked for there reads as a dropped connection.
    private func point(_ name: String) throws(StageError) {
        do { try checkpoint(name) } catch { throw .transient(.disconnected("stopped at \(name)")) }
    }

    /// Runs the job's pending stages in order until it is done, failed, or
    /// interrupted. Outbox failures (the local disk) throw.
    ///
    /// The stages are the job's outbox entries, replayed by the client
    /// stack's `OutboxReplay` one at a time: a stage leaves the line once
    /// the outbox recorded the hub's answer; a failure that `ReplayFailure`
    /// keeps stops the run with the stage still pending (the next `resume`
    /// sends it again with its key); one it sets aside fails the job.
    public func run(_ job: inout IntakeJob) throws(OutboxError) -> Outcome {
        var replay = OutboxReplay<PendingStage>(window: 1)
        replay.enqueue(PendingStage.pending(in: job))
        while job.state == .running, let pending = replay.takeSendable().first {
            let stage = pending.stage
            do throws(StageError) {
                try perform(stage, &job)
                try point("\(stage.rawValue):confirmed")
                replay.settle(pending.replayID)
            } catch {
                switch error {
                case .transient(let error):
                    replay.putBack(pending)
                    hub?.close()
                    hub = nil
                    return .interrupted(error)
                case .permanent(let reason):
                    replay.settle(pending.replayID)
                    try fail(&job, at: stage, reason: reason)
                    try removePhotos()
                    return .failed(reason)
                case .failedOnHub(let reason):
                    replay.settle(pending.replayID)
                    try outbox.finish(&job, state: .failed, stage: stage, reason: reason)
                    try removePhotos()
                    return .failed(reason)
                case .local(let error):
                    throw error
                }
            }
        }
        if job.state == .running {
            try outbox.finish(&job, state: .done)
        }
        try removePhotos()
        return job.state == .failed ? .failed(job.reason ?? "failed") : .done
    }

    /// Drops the photo files no unfinished job needs (the job's bytes are
    /// on the hub now, or the job has ended).
    private func removePhotos() throws(OutboxError) {
        let lock = try outbox.lockAll()
        defer { lock.release() }
        try outbox.removeUnneededPhotos()
    }

    private func perform(_ stage: IntakeStage, _ job: inout IntakeJob) throws(StageError) {
        switch stage {
        case .resolve: try resolve(&job)
        case .create: try create(&job)
        case .created: try created(&job)
        case .upload: try upload(&job)
        case .analyzed: try analyzed(&job)
        case .coverSet: try coverSet(&job)
        case .done: try done(&job)
        }
    }

    // MARK: Stages

    private func resolve(_ job: inout IntakeJob) throws(StageError) {
        let code = job.code ?? ""
        let response: HTTPClientResponse
        do {
            response = try http.get("/v1/resolve/\(RESTClient.percentEncode(code))")
        } catch {
            throw .transient(error)
        }
        let body = response.json
        guard let name = body?["name"]?.stringValue, name.hasPrefix("items/"),
              response.status == 200 || (response.status == 404 && body?["found"] == .bool(false)) else {
            throw Self.classify(response.refusal, status: response.status)
        }
        let found = response.status == 200
        try point("resolve:sent")
        job.item = name
        job.newItem = !found
        try record(&job, .resolve, ["found": .bool(found), "name": .string(name)])
        say("resolve: \(code) → \(name)\(found ? "" : " (new item)")")
    }

    private func create(_ job: inout IntakeJob) throws(StageError) {
        switch ask(IntakeRequests.create(job)) {
        case .success(let reply):
            try point("create:sent")
            try record(&job, .create, ["version": reply["version"] ?? .null, "seq": reply["seq"] ?? .null])
        case .failure(.refused(let error)) where error["code"]?.stringValue == "conflict":
            // The record exists: this job's id is random, so it was created
            // by an earlier attempt whose idempotency key has expired.
            guard let envelope = try recordEnvelope(job.record) else { throw Self.classify(.refused(error)) }
            try record(&job, .create, ["version": envelope["version"] ?? .null, "seq": envelope["seq"] ?? .null,
                                       "reconciled": true])
        case .failure(let error):
            throw Self.classify(error)
        }
        say("create: \(job.record)")
    }

    private func created(_ job: inout IntakeJob) throws(StageError) {
        var attempts = 0
        while true {
            attempts += 1
            switch ask(IntakeRequests.created(job)) {
            case .success(let reply):
                try point("created:sent")
                try record(&job, .created, result(of: reply, job))
                say("created: \(job.record) → created\(job.newItem ? ", new item \(job.item ?? "")" : "")")
                return
            case .failure(.refused(let error)):
                if try reconciled(&job, .created, error) { return }
                if job.newItem, attempts == 1, Self.isConflict(error, index: 0) {
                    // Someone created the item since the resolve stage: use it.
                    job.newItem = false
                    continue
                }
                throw Self.classify(.refused(error))
            case .failure(let error):
                throw Self.classify(error)
            }
        }
    }

    private func upload(_ job: inout IntakeJob) throws(StageError) {
        let total = job.photos.count
        for photo in job.photos where !photo.uploaded {
            try store(photo, of: total, &job)
        }
        var attempts = 0
        while true {
            attempts += 1
            let item = try itemEnvelope(job)
            let version = item["version"]?.numberValue?.int64Value ?? 0
            let photos = item["data"]?["photos"]?.arrayValue ?? []
            switch ask(IntakeRequests.upload(job, itemVersion: version, itemPhotos: photos)) {
            case .success(let reply):
                try point("upload:sent")
                var result = result(of: reply, job)
                result["photos"] = .array(job.photos.map { .string($0.sha256) })
                try record(&job, .upload, result)
                say("upload: \(total) photo(s) on \(job.item ?? "") → media-uploaded")
                return
            case .failure(.refused(let error)):
                if try reconciled(&job, .upload, error) { return }
                // The item changed between the read and the write: read again.
                if attempts < 5, Self.isConflict(error, index: 0) { continue }
                throw Self.classify(.refused(error))
            case .failure(let error):
                throw Self.classify(error)
            }
        }
    }

    /// PUTs one photo's bytes from the outbox and records that the hub has them.
    private func store(_ photo: IntakePhoto, of total: Int, _ job: inout IntakeJob) throws(StageError) {
        let file = outbox.photoPath(photo.sha256)
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw .permanent("photo \(photo.position + 1) (\(photo.source)) is missing from the outbox (\(file))")
        }
        defer { close(fd) }
        let label = "photo \(photo.position + 1)/\(total)"
        report(.started(label: label, size: photo.size))
        let response: HTTPClientResponse
        do {
            response = try http.put("/v1/blobs/\(photo.sha256)", body: .file(fd: fd, size: photo.size),
                                    headers: [("Content-Type", photo.type),
                                              ("Idempotency-Key", "\(job.key(.upload))/\(photo.sha256)")],
                                    progress: { [self] sent, size in report(.sent(sent, of: size)) })
        } catch {
            report(.abandoned)
            throw .transient(error)
        }
        guard response.status == 200 || response.status == 201 else {
            report(.abandoned)
            throw Self.classify(response.refusal, status: response.status)
        }
        if let stored = response.json?["sha256"]?.stringValue, stored != photo.sha256 {
            report(.abandoned)
            throw .permanent("the hub stored \(label) as \(stored), not \(photo.sha256)")
        }
        report(.stored(label: label, sha256: photo.sha256, size: photo.size, new: response.status == 201))
        try point("upload:\(photo.position + 1)")
        do { try outbox.markUploaded(&job, position: photo.position) } catch { throw .local(error) }
    }

    /// Waits for the hub to move the record media-uploaded → analyzed
    /// (it analyses the photos itself), watching the record's stage with a
    /// subscription, at most `analysisWaitMillis`; records the analysis, or
    /// that the wait ran out (then cover-set advances from media-uploaded
    /// and the hub's late advance is refused by its from-check).
    private func analyzed(_ job: inout IntakeJob) throws(StageError) {
        let photos = job.photos.count
        let start = clock()
        var envelope = try watch(job.record)
        defer { _ = ask(["op": "unsubscribe", "name": .string(job.record), "path": "stage"]) }
        // Before the first look, so that a crash here does not depend on
        // whether the hub has finished already (a small photo takes it
        // milliseconds).
        try point("analyzed:waiting")
        if let envelope, let line = try analysisSeen(envelope, &job) {
            say(line)
            return
        }
        report(.analysing(photos: photos, waited: 0))
        var lastTick = start
        var line: String?
        do throws(StageError) {
            while true {
                if let envelope, let seen = try analysisSeen(envelope, &job) {
                    line = seen
                    break
                }
                let waited = clock() - start
                let remaining = analysisWaitMillis - waited
                if remaining <= 0 {
                    try record(&job, .analyzed, ["stage": "media-uploaded", "waited": .number(JSONNumber(waited)),
                                                 "timeout": true])
                    line = "analysed: the hub did not analyse the photos within \(Self.seconds(analysisWaitMillis)); going on without it"
                    break
                }
                let push: JSONObject?
                do throws(HubError) {
                    guard let hub else { throw HubError.disconnected("the connection closed") }
                    push = try hub.nextPush(timeoutMillis: Int(min(remaining, 1000)))
                } catch {
                    throw .transient(error)
                }
                let now = clock()
                if now - lastTick >= 1000 {
                    lastTick = now
                    report(.analysing(photos: photos, waited: now - start))
                }
                // A change to the stage: read the record as it is now.
                if push != nil { envelope = try recordEnvelope(job.record) }
            }
        } catch {
            report(.analysisEnded)
            throw error
        }
        report(.analysisEnded)
        if let line { say(line) }
    }

    /// Subscribes to the record's stage and returns the record as it is.
    private func watch(_ name: String) throws(StageError) -> JSONObject? {
        switch ask(["op": "subscribe", "name": .string(name), "path": "stage"]) {
        case .success: break
        case .failure(let error): throw Self.classify(error)
        }
        return try recordEnvelope(name)
    }

    /// Whether the record is at analyzed or past it: then the stage is
    /// recorded (with the analysis when there is one) and the line to show
    /// is returned; nil while it is not. A failed record ends the job.
    private func analysisSeen(_ envelope: JSONObject, _ job: inout IntakeJob) throws(StageError) -> String? {
        guard let stage = envelope["data"]?["stage"]?.stringValue else { return nil }
        if stage == "failed" {
            let reason = envelope["data"]?["history"]?.arrayValue?.last?["reason"]?.stringValue
            throw .failedOnHub("\(job.record) was marked failed on the hub\(reason.map { ": \($0)" } ?? "")")
        }
        let order = IntakeStage.workflowOrder
        guard let have = order.firstIndex(of: stage), let want = order.firstIndex(of: "analyzed"), have >= want else {
            return nil
        }
        var result: JSONObject = ["stage": .string(stage), "version": envelope["version"] ?? .null,
                                  "seq": envelope["seq"] ?? .null]
        let analysis = IntakeAnalysis(envelope["data"]?["analysis"])
        if let analysis { result["analysis"] = .object(analysis.json) }
        if stage != "analyzed" { result["reconciled"] = true }
        try record(&job, .analyzed, result)
        return analysis?.summaryLine ?? "analysed: \(job.record) is already \(stage), without an analysis"
    }

    private func coverSet(_ job: inout IntakeJob) throws(StageError) {
        var attempts = 0
        while true {
            attempts += 1
            let item = try itemEnvelope(job)
            let hasCover = (item["data"]?["cover"]).map { !$0.isNull } ?? false
            let from = job.coverSetFrom
            switch ask(IntakeRequests.coverSet(job, itemHasCover: hasCover)) {
            case .success(let reply):
                try point("cover-set:sent")
                var result = result(of: reply, job)
                result["cover"] = .string(job.photos.first?.sha256 ?? "")
                result["from"] = .string(from)
                try record(&job, .coverSet, result)
                say("cover-set: \(job.photos.first?.sha256 ?? "")\(hasCover ? " (the item keeps its own cover)" : "")")
                return
            case .failure(.refused(let error)):
                if try reconciled(&job, .coverSet, error) { return }
                // The wait ran out, then the hub analysed before this
                // advance: take its analysis and advance from analyzed
                // (a refusal is not kept under the key: the same key is free).
                if from == "media-uploaded", attempts == 1, error["code"]?.stringValue == "conflict",
                   let envelope = try recordEnvelope(job.record), envelope["data"]?["stage"]?.stringValue == "analyzed",
                   let line = try analysisSeen(envelope, &job) {
                    say(line + " (after the wait)")
                    continue
                }
                throw Self.classify(.refused(error))
            case .failure(let error):
                throw Self.classify(error)
            }
        }
    }

    /// Milliseconds as people read a wait: `60 s`, `1.5 s`.
    static func seconds(_ millis: Int64) -> String {
        millis % 1000 == 0 ? "\(millis / 1000) s" : "\(Double(millis) / 1000) s"
    }

    private func done(_ job: inout IntakeJob) throws(StageError) {
        switch ask(IntakeRequests.done(job)) {
        case .success(let reply):
            try point("done:sent")
            var result = result(of: reply, job)
            if job.receive != nil, case .array(let results)? = reply["results"], results.count > 1 {
                result["stock"] = results[1]["value"] ?? .null
            }
            try record(&job, .done, result)
            say("done: \(job.record)\(job.receive.map { ", received \($0) into \(job.item ?? "")" } ?? "")")
        case .failure(.refused(let error)):
            if try reconciled(&job, .done, error) { return }
            throw Self.classify(.refused(error))
        case .failure(let error):
            throw Self.classify(error)
        }
    }

    // MARK: Failure

    /// Marks the job failed locally and, when the record exists, on the hub
    /// (`failed` needs a reason); the latter is best effort.
    private func fail(_ job: inout IntakeJob, at stage: IntakeStage, reason: String) throws(OutboxError) {
        try outbox.finish(&job, state: .failed, stage: stage, reason: reason)
        guard job.status(of: .create) == .confirmed else { return }
        switch ask(IntakeRequests.fail(job, reason: reason)) {
        case .success: say("failed: \(job.record) → failed")
        case .failure(let error): say("failed: could not mark \(job.record) failed on the hub: \(error)")
        }
    }

    // MARK: Helpers

    /// A refusal that may be explained by this very stage having been
    /// applied before (a retry whose idempotency key expired): true, with
    /// the stage recorded, when the record is already at or past the
    /// stage's target.
    private func reconciled(_ job: inout IntakeJob, _ stage: IntakeStage, _ error: JSONObject) throws(StageError) -> Bool {
        let code = error["code"]?.stringValue
        guard code == "conflict" || code == "illegal_transition", let target = stage.recordStage,
              let envelope = try recordEnvelope(job.record),
              let current = envelope["data"]?["stage"]?.stringValue else { return false }
        if current == "failed" {
            let reason = envelope["data"]?["history"]?.arrayValue?.last?["reason"]?.stringValue
            throw .failedOnHub("\(job.record) was marked failed on the hub\(reason.map { ": \($0)" } ?? "")")
        }
        let order = IntakeStage.workflowOrder
        guard let have = order.firstIndex(of: current), let want = order.firstIndex(of: target), have >= want else {
            return false
        }
        try record(&job, stage, ["version": envelope["version"] ?? .null, "seq": envelope["seq"] ?? .null,
                                 "reconciled": true])
        say("\(stage.rawValue): \(job.record) is already \(current)")
        return true
    }

    private func record(_ job: inout IntakeJob, _ stage: IntakeStage, _ result: JSONObject) throws(StageError) {
        do { try outbox.confirm(&job, stage, result: result) } catch { throw .local(error) }
    }

    /// The seq of an atomic write and the record's new version.
    private func result(of reply: JSONObject, _ job: IntakeJob) -> JSONObject {
        var result: JSONObject = ["seq": reply["seq"] ?? .null]
        for case .object(let entry) in reply["results"]?.arrayValue ?? [] where entry["name"] == .string(job.record) {
            result["version"] = entry["version"] ?? .null
        }
        return result
    }

    /// The intake record's envelope, nil when it does not exist.
    private func recordEnvelope(_ name: String) throws(StageError) -> JSONObject? {
        switch ask(["op": "get", "name": .string(name)]) {
        case .success(let envelope): return envelope
        case .failure(.refused(let error)) where error["code"]?.stringValue == "not_found": return nil
        case .failure(let error): throw Self.classify(error)
        }
    }

    private func itemEnvelope(_ job: IntakeJob) throws(StageError) -> JSONObject {
        guard let item = job.item, let envelope = try recordEnvelope(item) else {
            throw .permanent("the item \(job.item ?? "?") does not exist on the hub any more")
        }
        return envelope
    }

    /// One request over the WebSocket, connecting first if needed; after a
    /// transport failure the next request connects again.
    private func ask(_ request: IntakeRequest) -> Result<JSONObject, HubError> {
        ask(request.message)
    }

    private func ask(_ message: JSONObject) -> Result<JSONObject, HubError> {
        do throws(HubError) {
            let client: BlockingTallyClient
            if let hub { client = hub } else { client = try BlockingTallyClient(access: access) }
            hub = client
            return .success(try client.request(message))
        } catch {
            if case .refused = error {} else {
                hub?.close()
                hub = nil
            }
            return .failure(error)
        }
    }

    static func isConflict(_ error: JSONObject, index: Int) -> Bool {
        error["code"]?.stringValue == "conflict" && error["index"]?.numberValue?.int64Value == Int64(index)
    }

    /// The outbox replay's rule (`ReplayFailure`): transient for the
    /// network, the hub's storage or shutdown, a token to fix
    /// (`unauthorized`), HTTP 5xx; everything else is the hub saying no to
    /// this request, which sending it again will not change.
    static func classify(_ error: HubError, status: Int? = nil) -> StageError {
        switch ReplayFailure(error, httpStatus: status) {
        case .keep: .transient(error)
        case .setAside: .permanent(error.description)
        }
    }

    private func say(_ line: String) {
        guard verbose else { return }
        log(line)
    }

    private func report(_ event: PhotoUploadEvent) {
        guard verbose else { return }
        onUpload(event)
    }
}

/// A stage of a job still to confirm, as an outbox entry: in stage order,
/// all on the job's record.
struct PendingStage: OutboxReplayable {
    var stage: IntakeStage
    var replayID: Int64
    var replayLane: String

    /// The job's stages not yet confirmed, in order.
    static func pending(in job: IntakeJob) -> [PendingStage] {
        job.stages.enumerated().compactMap { index, row in
            row.status == .confirmed ? nil : PendingStage(stage: row.stage, replayID: Int64(index), replayLane: job.record)
        }
    }
}
