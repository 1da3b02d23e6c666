import TallyProtocol

/// The stages of an intake job, in the order they run. Each is one request
/// (the upload stage: one per photo, then one atomic write) with the stable
/// idempotency key `intake/<job>/<stage>`, so a stage retried after a crash
/// gets the hub's first answer instead of applying twice.
public enum IntakeStage: String, CaseIterable, Sendable {
    /// GET /v1/resolve/{code}: the existing item, or the name a new one gets.
    case resolve
    /// Creates the intake record (the hub stamps stage "queued").
    case create
    /// Creates a new item and advances queued → created, atomically.
    case created
    /// Stores each photo as a blob, then advances created → media-uploaded
    /// and adds the photos to the item, atomically.
    case upload
    /// Sends nothing: waits (up to the runner's `analysisWaitMillis`) for
    /// the hub to analyse the photos and advance media-uploaded → analyzed
    /// itself, and records the analysis; when the wait runs out it records
    /// that the record is still at media-uploaded.
    case analyzed
    /// Advances analyzed → cover-set (media-uploaded → cover-set when the
    /// hub did not analyse in time) with the first photo as cover.
    case coverSet = "cover-set"
    /// Advances cover-set → done, receiving stock when asked, atomically.
    case done

    /// The workflow stage the intake record is in once this stage is confirmed.
    public var recordStage: String? {
        switch self {
        case .resolve: return nil
        case .create: return "queued"
        case .created: return "created"
        case .upload: return "media-uploaded"
        case .analyzed: return "analyzed"
        case .coverSet: return "cover-set"
        case .done: return "done"
        }
    }

    /// The intake workflow's stages in order (contract: intake/), to tell
    /// whether a record is already past a stage.
    public static let workflowOrder = ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"]
}

/// Whether a stage has been confirmed by the hub and recorded locally.
public enum StageStatus: String, Sendable {
    case pending, confirmed, failed
}

/// A job's overall state in the outbox.
public enum JobState: String, Sendable {
    /// Not finished: `tally intake resume` continues it.
    case running
    case done
    /// Refused by the hub for a reason a retry cannot fix.
    case failed
}

/// One photo of a job, copied into the outbox under its SHA-256.
public struct IntakePhoto: Sendable {
    public var position: Int
    public var sha256: String
    public var size: Int
    public var type: String
    /// Where the user's file was (shown in status; never read again).
    public var source: String
    public var uploaded: Bool

    public init(position: Int, sha256: String, size: Int, type: String, source: String, uploaded: Bool) {
        (self.position, self.sha256, self.size, self.type) = (position, sha256, size, type)
        (self.source, self.uploaded) = (source, uploaded)
    }
}

/// One stage's row: its status and what the hub answered.
public struct StageRecord: Sendable {
    public var stage: IntakeStage
    public var status: StageStatus
    public var result: JSONObject?
    public var updated: Int64

    public init(stage: IntakeStage, status: StageStatus, result: JSONObject?, updated: Int64) {
        (self.stage, self.status, self.result, self.updated) = (stage, status, result, updated)
    }
}

/// An intake job as the outbox holds it.
public struct IntakeJob: Sendable {
    public var id: String
    /// The hub's HTTP base URL the job is bound to.
    public var hub: String
    public var created: Int64
    public var code: String?
    public var location: String?
    public var gps: (lat: Double, lon: Double)?
    public var receive: Int?
    /// The item's record name, once known (at creation without a code,
    /// after the resolve stage with one).
    public var item: String?
    /// Whether the job creates the item (the code named no item).
    public var newItem: Bool
    public var state: JobState
    public var reason: String?
    public var photos: [IntakePhoto]
    public var stages: [StageRecord]

    public init(id: String, hub: String, created: Int64, code: String?, location: String?,
                gps: (lat: Double, lon: Double)?, receive: Int?, item: String?, newItem: Bool, state: JobState,
                reason: String?, photos: [IntakePhoto], stages: [StageRecord]) {
        (self.id, self.hub, self.created, self.code, self.location) = (id, hub, created, code, location)
        (self.gps, self.receive, self.item, self.newItem, self.state) = (gps, receive, item, newItem, state)
        (self.reason, self.photos, self.stages) = (reason, photos, stages)
    }

    /// The intake record's name.
    public var record: String { "intake/\(id)" }

    /// The idempotency key of a stage's request.
    public func key(_ stage: IntakeStage) -> String { "intake/\(id)/\(stage.rawValue)" }

    public func status(of stage: IntakeStage) -> StageStatus? {
        stages.first { $0.stage == stage }?.status
    }

    /// The first stage not yet confirmed, nil when all are.
    public var nextStage: IntakeStage? {
        stages.first { $0.status != .confirmed }?.stage
    }

    /// The analysis the hub recorded (`analysis` of the record at
    /// `analyzed`), as the analyzed stage confirmed it; nil before, or when
    /// the wait ran out.
    public var analysis: IntakeAnalysis? {
        IntakeAnalysis(stages.first { $0.stage == .analyzed && $0.status == .confirmed }?.result?["analysis"])
    }

    /// The stage cover-set advances from: `analyzed` once the analyzed
    /// stage saw the record there, else `media-uploaded` (the wait ran out,
    /// or a job from before the stage existed).
    public var coverSetFrom: String {
        let row = stages.first { $0.stage == .analyzed && $0.status == .confirmed }
        return row?.result?["stage"]?.stringValue == "analyzed" ? "analyzed" : "media-uploaded"
    }

    /// The stages a job runs: resolve only with a code.
    public static func stages(withCode: Bool) -> [IntakeStage] {
        IntakeStage.allCases.filter { $0 != .resolve || withCode }
    }

    /// The job as JSON for `--json` output and `status --json`.
    public var json: JSONObject {
        var object: JSONObject = ["job": .string(id), "record": .string(record), "hub": .string(hub),
                                  "state": .string(state.rawValue), "created": .number(JSONNumber(created))]
        object["item"] = item.map { .string($0) } ?? .null
        if item != nil { object["newItem"] = .bool(newItem) }
        if let code { object["code"] = .string(code) }
        if let location { object["location"] = .string(location) }
        if let gps {
            object["gps"] = .object(["lat": JSONNumber(gps.lat).map(JSONValue.number) ?? .null,
                                     "lon": JSONNumber(gps.lon).map(JSONValue.number) ?? .null])
        }
        if let receive { object["receive"] = .number(JSONNumber(receive)) }
        if let reason { object["reason"] = .string(reason) }
        object["photos"] = .array(photos.map { photo in
            .object(["sha256": .string(photo.sha256), "size": .number(JSONNumber(photo.size)),
                     "type": .string(photo.type), "source": .string(photo.source),
                     "uploaded": .bool(photo.uploaded)])
        })
        object["stages"] = .array(stages.map { row in
            var stage: JSONObject = ["stage": .string(row.stage.rawValue), "status": .string(row.status.rawValue)]
            if let result = row.result { stage["result"] = .object(result) }
            return .object(stage)
        })
        if let analysis { object["analysis"] = .object(analysis.json) }
        return object
    }
}
