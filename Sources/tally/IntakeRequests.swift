import TallyProtocol

/// The hub requests of each intake stage, built from the job alone (pure:
/// no I/O), so a stage re-sent after a crash is the same request with the
/// same idempotency key.
enum IntakeRequests {
    /// `create`: the intake record, which must not exist yet (`version: 0`).
    /// The hub stamps `stage: "queued"`, `history` and `owner`.
    static func create(_ job: IntakeJob) -> JSONObject {
        var data: JSONObject = ["item": job.item.map { .string($0) } ?? .null]
        if let code = job.code { data["code"] = .string(code) }
        if let location = job.location { data["location"] = .string(location) }
        if let gps = job.gps, let lat = JSONNumber(gps.lat), let lon = JSONNumber(gps.lon) {
            data["gps"] = .object(["lat": .number(lat), "lon": .number(lon)])
        }
        data["expectedPhotos"] = .number(JSONNumber(job.photos.count))
        if let receive = job.receive { data["receive"] = .number(JSONNumber(receive)) }
        return ["op": "set", "name": .string(job.record), "version": 0, "data": .object(data),
                "idem": .string(job.key(.create))]
    }

    /// The data of an item the job creates (its code becomes one of its
    /// `codes`, so the next scan of that code resolves to it).
    static func newItem(_ job: IntakeJob) -> JSONObject {
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
    static func created(_ job: IntakeJob) -> JSONObject {
        var ops: [JSONValue] = []
        if job.newItem, let item = job.item {
            ops.append(["op": "set", "name": .string(item), "version": 0, "data": .object(newItem(job))])
        }
        ops.append(advance(job, from: "queued", to: "created"))
        return write(ops, key: job.key(.created))
    }

    /// `upload` (after every photo is stored): the item's `photos` become
    /// its current ones plus the job's (each once, existing order kept; a
    /// merge patch replaces arrays whole, RFC 7396 §2, so the current list
    /// is read first and the merge carries `version` to catch a writer in
    /// between), and created → media-uploaded with the job's photos.
    static func upload(_ job: IntakeJob, itemVersion: Int64, itemPhotos: [JSONValue]) -> JSONObject {
        let shas = job.photos.map(\.sha256)
        var photos = itemPhotos
        for sha in shas where !photos.contains(.string(sha)) { photos.append(.string(sha)) }
        let merge: JSONValue = ["op": "merge", "name": .string(job.item ?? ""), "version": .number(JSONNumber(itemVersion)),
                                "data": ["photos": .array(photos)]]
        let step = advance(job, from: "created", to: "media-uploaded",
                           data: ["photos": .array(shas.map { .string($0) })])
        return write([merge, step], key: job.key(.upload))
    }

    /// `cover-set`: the first photo becomes the record's cover, and the
    /// item's when it has none yet (an existing item keeps the cover it has).
    static func coverSet(_ job: IntakeJob, itemHasCover: Bool) -> JSONObject {
        let cover = JSONValue.string(job.photos.first?.sha256 ?? "")
        var ops: [JSONValue] = []
        if !itemHasCover {
            ops.append(["op": "merge", "name": .string(job.item ?? ""), "data": ["cover": cover]])
        }
        ops.append(advance(job, from: "media-uploaded", to: "cover-set", data: ["cover": cover]))
        return write(ops, key: job.key(.coverSet))
    }

    /// `done`: cover-set → done, with `--receive N` adding N to the item's
    /// stock in the same atomic write.
    static func done(_ job: IntakeJob) -> JSONObject {
        var ops = [advance(job, from: "cover-set", to: "done")]
        if let receive = job.receive, let item = job.item {
            ops.append(["op": "increment", "name": .string(item), "path": "stock", "by": .number(JSONNumber(receive))])
        }
        return write(ops, key: job.key(.done))
    }

    /// Marks the record failed with a reason (after a refusal no retry can fix).
    static func fail(_ job: IntakeJob, reason: String) -> JSONObject {
        ["op": "advance", "name": .string(job.record), "to": "failed", "reason": .string(String(reason.prefix(1000))),
         "idem": .string("intake/\(job.id)/failed")]
    }

    static func advance(_ job: IntakeJob, from: String, to: String, data: JSONObject? = nil) -> JSONValue {
        var op: JSONObject = ["op": "advance", "name": .string(job.record), "from": .string(from), "to": .string(to)]
        if let data { op["data"] = .object(data) }
        return .object(op)
    }

    static func write(_ ops: [JSONValue], key: String) -> JSONObject {
        ["op": "write", "ops": .array(ops), "idem": .string(key)]
    }
}
