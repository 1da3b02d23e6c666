import TallyClient
import TallyIntake
import TallyProtocol
import TallyCommandLine

/// `tally intake accept JOB`: the analysis's proposals written on the item.
extension IntakeCommand {
    static func accept(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "intake accept", options: acceptOptions, HubAccess.options)
        if a.flag("help") { print(subHelps["accept"]!); return 0 }
        guard a.positionals.count == 1, let wanted = a.positionals.first, !wanted.isEmpty else {
            throw UsageError(message: "intake accept takes one JOB (a job id, id prefix or intake/<id>), not \(a.positionals.count)")
        }
        let access = try checkedAccess(a)
        // A job of this outbox by id or prefix; else the record named.
        let path = try outboxPath(flag: a.string("outbox"))
        let outbox = try IntakeOutbox.existing(path: path)
        var job: IntakeJob?
        if let outbox {
            let jobs = try outbox.jobs()
            do throws(IntakeJobLookup) { job = try jobs.job(named: wanted) } catch {
                if case .ambiguous = error { throw failure(error, wanted: wanted, outbox: outbox) }
            }
        }
        let record = job?.record ?? (wanted.hasPrefix("intake/") ? wanted : "intake/\(wanted)")
        do { try Names.validate(record, field: "JOB") } catch {
            throw UsageError(message: "'\(wanted)' is not a job id or intake record name: \(error.message)")
        }
        let done: IntakeAcceptance
        do { done = try IntakeAccept.run(access: access, record: record) } catch let refusal as IntakeAcceptRefusal {
            throw CommandFailure.intakeAccept(refusal)
        }
        if let job, let outbox {
            // The outbox's copy of the analysis shows it accepted too; the
            // hub has it already, so a local failure only warns.
            do { try outbox.recordAccepted(jobID: job.id, accepted: done.accepted) } catch {
                printError("accepted on the hub, but the outbox could not record it: \(error.message)")
            }
        }
        if a.flag("json") {
            output(.object(done.json))
        } else {
            printError(done.line)
            ClientCommands.output(line: done.item)
        }
        return 0
    }
}
