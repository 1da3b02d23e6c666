import TallyClient

/// What `tally intake resume [JOB]` does with the outbox's jobs for the hub
/// it is pointed at: a job named by the caller, by its state and hub; with
/// none named, every unfinished job bound to that hub (a job resumes only
/// against the hub it was created for, or a list of hubs of one cluster
/// that holds it: `HubAccess.shareAHub`).
public enum IntakeResumePlan: Sendable {
    /// The named job: unfinished and bound to this hub.
    case run(IntakeJob)
    /// The named job is done already.
    case done(IntakeJob)
    /// The named job failed for good: a new job is needed.
    case failed(IntakeJob)
    /// The named job belongs to another hub.
    case elsewhere(IntakeJob)
    /// No job named: the unfinished ones for this hub, in outbox order, and
    /// those bound to other hubs (skipped).
    case unfinished([IntakeJob], elsewhere: [IntakeJob])

    /// - Parameters:
    ///   - hub: the hub's HTTP base, or the comma-separated bases of several
    ///     (`HubAccess.jobHub`), as jobs record it.
    ///   - wanted: a job's id, `intake/<id>`, or a unique id prefix.
    public init(jobs: [IntakeJob], hub: String, wanted: String?) throws(IntakeJobLookup) {
        guard let wanted else {
            let running = jobs.filter { $0.state == .running }
            self = .unfinished(running.filter { HubAccess.shareAHub($0.hub, hub) },
                               elsewhere: running.filter { !HubAccess.shareAHub($0.hub, hub) })
            return
        }
        let job = try jobs.job(named: wanted)
        switch job.state {
        case .done: self = .done(job)
        case .failed: self = .failed(job)
        case .running: self = HubAccess.shareAHub(job.hub, hub) ? .run(job) : .elsewhere(job)
        }
    }
}

/// Why no single job answers to a name.
public enum IntakeJobLookup: Error, Equatable {
    case notFound
    /// A prefix several job ids share.
    case ambiguous(matches: Int)
}

extension Array where Element == IntakeJob {
    /// The job `wanted` names: its id, `intake/<id>`, or a prefix of its id
    /// of 4 or more characters that no other job's id shares.
    public func job(named wanted: String) throws(IntakeJobLookup) -> IntakeJob {
        let id = wanted.hasPrefix("intake/") ? String(wanted.dropFirst(7)) : wanted
        if let job = first(where: { $0.id == id }) { return job }
        let matches = id.count >= 4 ? filter { $0.id.hasPrefix(id) } : []
        if matches.count == 1 { return matches[0] }
        throw matches.isEmpty ? .notFound : .ambiguous(matches: matches.count)
    }
}
