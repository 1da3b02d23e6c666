@preconcurrency import Glibc
import TallyClient
import TallyIntake
import TallyProtocol

/// `tally intake status [JOB]`: what the outbox knows about each job.
extension IntakeCommand {
    static func status(_ args: ArraySlice<String>) throws -> Int32 {
        // The options of every intake command: `--server` and `--quiet`
        // change nothing here, but `tally intake --help` lists them.
        let a = try Arguments(args, command: "intake status", options: options, HubAccess.options)
        if a.flag("help") { print(help); return 0 }
        guard a.positionals.count <= 1 else {
            throw UsageError(message: "intake status takes at most one JOB, not \(a.positionals.count)")
        }
        let outboxPath = try outboxPath(flag: a.string("outbox"))
        // Looking creates nothing: no outbox file means no jobs.
        if access(outboxPath, F_OK) != 0, errno == ENOENT {
            if let wanted = a.positionals.first { throw CommandFailure.noIntakeOutbox(job: wanted, path: outboxPath) }
            if a.flag("json") {
                output(.object(["outbox": .string(outboxPath), "jobs": .array([])]))
            } else {
                print("no intake jobs in \(outboxPath)")
            }
            return 0
        }
        let outbox = try IntakeOutbox(path: outboxPath)
        let jobs = try outbox.jobs()
        if let wanted = a.positionals.first {
            let job = try find(wanted, in: jobs, outbox: outbox)
            if a.flag("json") { return printJSON(job) }
            show(job)
            return 0
        }
        if a.flag("json") {
            output(.object(["outbox": .string(outbox.path), "jobs": .array(jobs.map { .object($0.json) })]))
            return 0
        }
        if jobs.isEmpty { print("no intake jobs in \(outbox.path)") }
        for job in jobs { show(job) }
        return 0
    }

    private static func show(_ job: IntakeJob) {
        var head = "job \(job.id) \(job.record) \(job.state.rawValue)"
        if let item = job.item { head += " item \(item)\(job.newItem ? " (new)" : "")" }
        head += " hub \(job.hub)"
        print(head)
        if let reason = job.reason { print("  reason: \(reason)") }
        for row in job.stages {
            var line = "  " + row.stage.rawValue.padding(10) + row.status.rawValue.padding(10)
            if row.stage == .upload {
                line += "\(job.photos.filter(\.uploaded).count)/\(job.photos.count) photos stored"
                if let seq = row.result?["seq"], !seq.isNull { line += ", seq \(seq)" }
            } else if let result = row.result {
                line += result.map { "\($0.key) \($0.value.stringValue ?? $0.value.serializedString)" }.joined(separator: ", ")
            }
            print(line)
        }
        for photo in job.photos {
            print("  photo \(photo.position + 1) \(photo.sha256) \(photo.type) \(UploadProgress.size(photo.size))\(photo.uploaded ? " stored" : "") \(photo.source)")
        }
    }

    /// A job by id, `intake/<id>`, or a unique id prefix (4+ characters).
    static func find(_ wanted: String, in jobs: [IntakeJob], outbox: IntakeOutbox) throws -> IntakeJob {
        let id = wanted.hasPrefix("intake/") ? String(wanted.dropFirst(7)) : wanted
        if let job = jobs.first(where: { $0.id == id }) { return job }
        let matches = id.count >= 4 ? jobs.filter { $0.id.hasPrefix(id) } : []
        if matches.count == 1 { return matches[0] }
        if matches.count > 1 {
            throw UsageError(message: "'\(wanted)' matches \(matches.count) intake jobs: give more of the id")
        }
        throw CommandFailure.noIntakeJob(wanted, outbox: outbox.path)
    }

    @discardableResult
    static func printJSON(_ job: IntakeJob) -> Int32 {
        output(.object(job.json))
        return 0
    }
}
