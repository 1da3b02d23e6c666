import TallyProtocol

/// What a run of jobs came to (`tally intake new|resume`): the jobs it
/// reached, in order, and whether one was skipped (another process ran it)
/// or failed, or the run was interrupted — the exit status is 1 for any.
public struct IntakeRunSummary {
    public private(set) var jobs: [IntakeJob] = []
    public private(set) var failed = false
    public private(set) var interrupted = false

    public init() {}

    public var succeeded: Bool { !failed && !interrupted }

    public mutating func record(_ event: IntakeRunner.JobEvent) {
        switch event {
        case .busy(let job):
            jobs.append(job)
            failed = true
        case .starting:
            break
        case .ran(let job, let outcome):
            jobs.append(job)
            switch outcome {
            case .done: break
            case .failed: failed = true
            case .interrupted: interrupted = true
            }
        }
    }

    /// `--json`: the job of a run of one, else `{"jobs": […]}`.
    public func json(single: Bool) -> JSONObject {
        single && jobs.count == 1 ? jobs[0].json : ["jobs": .array(jobs.map { .object($0.json) })]
    }
}
