import TallyClient
import TallyIntake
import TallyProtocol
import TallyCommandLine

/// `tally intake status [JOB]`: what the outbox knows about each job.
extension IntakeCommand {
    static func status(_ args: ArraySlice<String>) throws -> Int32 {
        // The options of every intake command: `--server` and `--quiet`
        // change nothing here, but its help lists them (as the others' do).
        let a = try Arguments(args, command: "intake status", options: options, HubAccess.options)
        if a.flag("help") { print(subHelps["status"]!); return 0 }
        guard a.positionals.count <= 1 else {
            throw UsageError(message: "intake status takes at most one JOB, not \(a.positionals.count)")
        }
        let path = try outboxPath(flag: a.string("outbox"))
        let outbox = try IntakeOutbox.existing(path: path)
        let jobs = try outbox?.jobs() ?? []
        if let wanted = a.positionals.first {
            guard let outbox else { throw CommandFailure.noIntakeOutbox(job: wanted, path: path) }
            let job: IntakeJob
            do { job = try jobs.job(named: wanted) } catch { throw failure(error, wanted: wanted, outbox: outbox) }
            if a.flag("json") { return printJSON(job) }
            job.statusLines.forEach { print($0) }
            return 0
        }
        if a.flag("json") {
            output(.object(["outbox": .string(path), "jobs": .array(jobs.map { .object($0.json) })]))
            return 0
        }
        if jobs.isEmpty { print("no intake jobs in \(path)") }
        for job in jobs { job.statusLines.forEach { print($0) } }
        return 0
    }

    /// Why no job answers to `wanted`: an ambiguous prefix is a usage
    /// mistake, an unknown job a failure.
    static func failure(_ error: IntakeJobLookup, wanted: String, outbox: IntakeOutbox) -> any Error {
        switch error {
        case .ambiguous(let count): UsageError(message: "'\(wanted)' matches \(count) intake jobs: give more of the id")
        case .notFound: CommandFailure.noIntakeJob(wanted, outbox: outbox.path)
        }
    }

    @discardableResult
    static func printJSON(_ job: IntakeJob) -> Int32 {
        output(.object(job.json))
        return 0
    }
}
