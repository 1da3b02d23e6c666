/// Several jobs in one run (`tally intake resume`): each under its lock,
/// one after another, stopping at the first network failure.
extension IntakeRunner {
    /// What happened to each job of `run(_:held:_:)`, in order.
    public enum JobEvent {
        /// Another process is running the job right now: skipped.
        case busy(IntakeJob)
        /// The job, as the outbox has it once locked, is about to run.
        case starting(IntakeJob)
        /// The job ran: done, failed, or interrupted (the last event then).
        case ran(IntakeJob, Outcome)
    }

    /// Why a run of jobs stopped early: the outbox (the local disk) failed.
    public enum RunError: Error {
        /// Taking a job's lock or reading it again failed.
        case outbox(OutboxError)
        /// Recording a job's progress failed; it stays resumable from where
        /// the outbox has it.
        case kept(OutboxError, job: String)
    }

    /// Runs the jobs one after another. Each runs under its lock (`held`:
    /// already taken for the first) and is read again once locked, since
    /// another process may have moved it on meanwhile. After an interrupted
    /// job the run stops: the next would meet the same network.
    public func run(_ jobs: [IntakeJob], held: OutboxLock? = nil, _ event: (JobEvent) -> Void) throws(RunError) {
        for (index, var job) in jobs.enumerated() {
            let lock: OutboxLock
            do throws(OutboxError) {
                var acquired = index == 0 ? held : nil
                if acquired == nil { acquired = try outbox.lockJob(job.id) }
                guard let acquired else {
                    event(.busy(job))
                    continue
                }
                lock = acquired
                if let current = try outbox.jobs(id: job.id).first { job = current }
            } catch {
                throw .outbox(error)
            }
            defer { lock.release() }
            event(.starting(job))
            let outcome: Outcome
            do {
                outcome = job.state == .running ? try run(&job) : (job.state == .done ? .done : .failed(job.reason ?? ""))
            } catch {
                throw .kept(error, job: job.id)
            }
            event(.ran(job, outcome))
            if case .interrupted = outcome { return }
        }
    }
}
