import TallyClient
import TallyProtocol

/// Why `tally intake accept` wrote nothing; the message says what to do.
public enum IntakeAcceptRefusal: Error, Equatable, Sendable {
    case noRecord(String)
    /// The record has no analysis (yet): it is at `stage`.
    case noAnalysis(record: String, stage: String)
    /// The analysis proposes nothing, or nothing the item lacks.
    case nothingToAccept(record: String, why: String)
    case alreadyAccepted(record: String, by: String, time: Int64)
    /// The caller (`user`, from the hub's hello) is not the record's owner.
    case notOwner(record: String, owner: String, user: String)
    /// The item was changed by others on every attempt.
    case busy(item: String, attempts: Int)

    public var message: String {
        switch self {
        case .noRecord(let record):
            "no intake record \(record) on the hub"
        case .noAnalysis(let record, let stage):
            "\(record) has no analysis yet (it is at \(stage)): nothing to accept; 'tally intake status' shows its stages"
        case .nothingToAccept(let record, let why):
            "nothing to accept for \(record): \(why)"
        case .alreadyAccepted(let record, let by, let time):
            "the proposals of \(record) were already accepted by \(by) at \(IntakeAnalysis.utc(time))"
        case .notOwner(let record, let owner, let user):
            "only the job's owner may accept its proposals: \(record) belongs to \(owner), not \(user)"
        case .busy(let item, let attempts):
            "\(item) changed under each of \(attempts) attempts; nothing was written: run 'tally intake accept' again"
        }
    }
}

/// What an accept wrote.
public struct IntakeAcceptance: Sendable {
    public var record: String
    public var item: String
    public var seq: JSONValue
    /// The serials and codes the item gained (those it had are not repeated).
    public var serials: [String]
    public var codes: [String]
    public var name: String?
    public var accepted: JSONObject

    public var json: JSONObject {
        var object: JSONObject = ["record": .string(record), "item": .string(item), "seq": seq,
                                  "serials": .array(serials.map(JSONValue.string)),
                                  "codes": .array(codes.map(JSONValue.string)), "accepted": .object(accepted)]
        if let name { object["name"] = .string(name) }
        return object
    }

    /// `accepted: serials SN-4711; codes …; name "…" → items/x`.
    public var line: String {
        let taken = IntakeAnalysis.Proposals(serials: serials, codes: codes, name: name)
        return "accepted: \(IntakeAnalysis.describe(taken)) → \(item)"
    }
}

/// `tally intake accept JOB`: the analysis's proposals written on the item
/// and `accepted` merged into the record's analysis, in one atomic write
/// whose merges carry the versions read (a writer in between makes it a
/// conflict, and the accept reads again), under the idempotency key
/// `intake/<id>/accept`.
public enum IntakeAccept {
    /// The write for a record and its item as read (`get` envelopes), by
    /// `user` (nil: an open hub, where the owner is not checked) at `time`.
    public static func plan(record: JSONObject, item: JSONObject?, user: String?,
                            time: Int64) throws(IntakeAcceptRefusal) -> (IntakeRequest, IntakeAcceptance) {
        let name = record["name"]?.stringValue ?? ""
        let data = record["data"]
        let stage = data?["stage"]?.stringValue ?? "?"
        guard let analysis = IntakeAnalysis(data?["analysis"]) else { throw .noAnalysis(record: name, stage: stage) }
        if let user, let owner = data?["owner"]?.stringValue, owner != user {
            throw .notOwner(record: name, owner: owner, user: user)
        }
        if let accepted = analysis.accepted {
            throw .alreadyAccepted(record: name, by: accepted.by, time: accepted.time)
        }
        let proposals = analysis.proposals
        guard !proposals.isEmpty else {
            throw .nothingToAccept(record: name, why: "the analysis (\(analysis.status)) proposes no serial, code or name")
        }
        guard let itemName = data?["item"]?.stringValue, let item else {
            throw .nothingToAccept(record: name, why: "its item \(data?["item"]?.stringValue ?? "?") does not exist")
        }
        let itemData = item["data"]
        var serials = itemData?["serials"]?.arrayValue ?? []
        var codes = itemData?["codes"]?.arrayValue ?? []
        let added = (serials: proposals.serials.filter { !serials.contains(.string($0)) }.uniqued,
                     codes: proposals.codes.filter { !codes.contains(.string($0)) }.uniqued)
        serials += added.serials.map(JSONValue.string)
        codes += added.codes.map(JSONValue.string)
        let newName = proposals.name.flatMap { itemData?["name"]?.stringValue == $0 ? nil : $0 }
        guard !added.serials.isEmpty || !added.codes.isEmpty || newName != nil else {
            throw .nothingToAccept(record: name, why: "\(itemName) already has every proposed serial, code and name")
        }
        var patch: JSONObject = ["serials": .array(serials), "codes": .array(codes)]
        if let newName { patch["name"] = .string(newName) }
        let accepted: JSONObject = ["by": .string(user ?? "anonymous"), "time": .number(JSONNumber(time))]
        let id = name.hasPrefix("intake/") ? String(name.dropFirst(7)) : name
        let request = IntakeRequest(operations: [
            .merge(itemName, patch: patch, version: item["version"]?.numberValue?.int64Value ?? 0),
            .merge(name, patch: ["analysis": .object(["accepted": .object(accepted)])],
                   version: record["version"]?.numberValue?.int64Value ?? 0),
        ], idem: "intake/\(id)/accept", atomic: true)
        return (request, IntakeAcceptance(record: name, item: itemName, seq: .null, serials: added.serials,
                                          codes: added.codes, name: newName, accepted: accepted))
    }

    /// Reads the record and its item, writes, and reads again after a
    /// conflict (at most 5 times). A lost connection sends the same write
    /// with the same key again (on the next hub of the list), which the
    /// hub answers with its first reply.
    /// - Throws: `IntakeAcceptRefusal`, or the `HubError` of the hub.
    public static func run(access: HubAccess, record name: String,
                           time: @escaping () -> Int64 = IntakeOutbox.now) throws -> IntakeAcceptance {
        var sent: (IntakeRequest, IntakeAcceptance)?
        let outcome = try BlockingTallyClient.onFirstReachable(access, repeatable: true) {
            client throws(HubError) -> Result<IntakeAcceptance, IntakeAcceptRefusal> in
            var attempts = 0
            while true {
                attempts += 1
                let planned: (IntakeRequest, IntakeAcceptance)
                if let sent { planned = sent } else {
                    guard let record = try get(client, name) else { return .failure(.noRecord(name)) }
                    let item = try record["data"]?["item"]?.stringValue.flatMap { (item) throws(HubError) in
                        try get(client, item)
                    }
                    do throws(IntakeAcceptRefusal) {
                        planned = try plan(record: record, item: item, user: client.user, time: time())
                    } catch {
                        return .failure(error)
                    }
                }
                sent = planned
                do throws(HubError) {
                    let reply = try client.request(planned.0.message)
                    var done = planned.1
                    done.seq = reply["seq"] ?? .null
                    return .success(done)
                } catch .refused(let error) where error["code"]?.stringValue == "conflict" {
                    // Someone wrote the item or the record since the read.
                    guard attempts < 5 else { return .failure(.busy(item: planned.1.item, attempts: attempts)) }
                    sent = nil
                }
            }
        }
        return try outcome.get()
    }

    private static func get(_ client: BlockingTallyClient, _ name: String) throws(HubError) -> JSONObject? {
        do { return try client.request(["op": "get", "name": .string(name)]) } catch .refused(let error)
            where error["code"]?.stringValue == "not_found" { return nil }
    }
}

extension Array where Element == String {
    /// Each once, first occurrence kept.
    var uniqued: [String] {
        var seen = Set<String>()
        return filter { seen.insert($0).inserted }
    }
}
