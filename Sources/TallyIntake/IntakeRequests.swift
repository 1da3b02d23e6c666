import TallyClient
import TallyProtocol

/// One stage's request: typed writes (`WriteOperation`) and the idempotency
/// key that makes a re-send apply once.
public struct IntakeRequest: Sendable, Equatable {
    public var operations: [WriteOperation]
    public var idem: String
    /// Sent as one atomic `write` (all or none) rather than a lone operation.
    public var atomic: Bool

    /// The protocol message (without `id`, which the client adds).
    public var message: JSONObject {
        if atomic || operations.count != 1 {
            return ["op": "write", "ops": .array(operations.map { .object($0.json) }), "idem": .string(idem)]
        }
        var message = operations[0].json
        message["idem"] = .string(idem)
        return message
    }
}

/// The hub requests of each intake stage, built from the job alone (pure:
/// no I/O), so a stage re-sent after a crash is the same request with the
/// same idempotency key.
public enum IntakeRequests {
    /// `create`: the intake record, which must not exist yet (`version: 0`).
    /// The hub stamps `stage: "queued"`, `history` and `owner`.
    public static func create(_ job: IntakeJob) -> IntakeRequest {
        var data: JSONObject = ["item": job.item.map { .string($0) } ?? .null]
        if let code = job.code { data["code"] = .string(code) }
        if let location = job.location { data["location"] = .string(location) }
        if let gps = job.gps, let lat = JSONNumber(gps.lat), let lon = JSONNumber(gps.lon) {
            data["gps"] = .object(["lat": .number(lat), "lon": .number(lon)])
        }
        data["expectedPhotos"] = .int(Int64(job.photos.count))
        if let receive = job.receive { data["receive"] = .int(Int64(receive)) }
        return IntakeRequest(operations: [.set(job.record, data: data, version: 0)], idem: job.key(.create), atomic: false)
    }

    /// The data of an item the job creates (its code becomes one of its
    /// `codes`, so the next scan of that code resolves to it).
    public static func newItem(_ job: IntakeJob) -> JSONObject {
        var data: JSONObject = ["name": .string(job.code ?? "intake \(job.id)")]
        if let location = job.location { data["location"] = .string(location) }
        data["codes"] = .array(job.code.map { [.string($0)] } ?? [])
        data["serials"] = .array([])
        data["stock"] = 0
        data["photos"] = .array([])
        return data
    }

    /// `created`: the new item (only when the code named none) and
    /// queued → created, as one atomic write.
    public static func created(_ job: IntakeJob) -> IntakeRequest {
        var ops: [WriteOperation] = []
        if job.newItem, let item = job.item {
            ops.append(.set(item, data: newItem(job), version: 0))
        }
        ops.append(.advance(job.record, from: "queued", to: "created"))
        return IntakeRequest(operations: ops, idem: job.key(.created), atomic: true)
    }

    /// `upload` (after every photo is stored): the item's `photos` become
    /// its current ones plus the job's (each once, existing order kept; a
    /// merge patch replaces arrays whole, RFC 7396 §2, so the current list
    /// is read first and the merge carries `version` to catch a writer in
    /// between), and created → media-uploaded with the job's photos.
    public static func upload(_ job: IntakeJob, itemVersion: Int64, itemPhotos: [JSONValue]) -> IntakeRequest {
        let shas = job.photos.map(\.sha256)
        var photos = itemPhotos
        for sha in shas where !photos.contains(.string(sha)) { photos.append(.string(sha)) }
        let ops: [WriteOperation] = [
            .merge(job.item ?? "", patch: ["photos": .array(photos)], version: itemVersion),
            .advance(job.record, from: "created", to: "media-uploaded", data: ["photos": .array(shas.map { .string($0) })]),
        ]
        return IntakeRequest(operations: ops, idem: job.key(.upload), atomic: true)
    }

    /// `cover-set`: the first photo becomes the record's cover, and the
    /// item's when it has none yet (an existing item keeps the cover it has);
    /// from analyzed, or from media-uploaded when the hub did not analyse
    /// within the runner's wait (`IntakeJob.coverSetFrom`).
    public static func coverSet(_ job: IntakeJob, itemHasCover: Bool) -> IntakeRequest {
        let cover = JSONValue.string(job.photos.first?.sha256 ?? "")
        var ops: [WriteOperation] = []
        if !itemHasCover {
            ops.append(.merge(job.item ?? "", patch: ["cover": cover]))
        }
        ops.append(.advance(job.record, from: job.coverSetFrom, to: "cover-set", data: ["cover": cover]))
        return IntakeRequest(operations: ops, idem: job.key(.coverSet), atomic: true)
    }

    /// `done`: cover-set → done, with `--receive N` adding N to the item's
    /// stock in the same atomic write.
    public static func done(_ job: IntakeJob) -> IntakeRequest {
        var ops: [WriteOperation] = [.advance(job.record, from: "cover-set", to: "done")]
        if let receive = job.receive, let item = job.item {
            ops.append(.increment(item, path: "stock", by: JSONNumber(receive)))
        }
        return IntakeRequest(operations: ops, idem: job.key(.done), atomic: true)
    }

    /// Marks the record failed with a reason (after a refusal no retry can fix).
    public static func fail(_ job: IntakeJob, reason: String) -> IntakeRequest {
        IntakeRequest(operations: [.advance(job.record, to: "failed", reason: String(reason.prefix(1000)))],
                      idem: "intake/\(job.id)/failed", atomic: false)
    }
}
