@preconcurrency import Glibc
import TallyClient
import TallyIntake
import TallyNet
import TallyCommandLine

/// `tally intake new|resume|status|accept`: intake jobs with photos, kept in a
/// persistent local outbox so a job killed at any point continues from its
/// last confirmed stage (seed 000: "the outbox persists photos, IDs, and
/// confirmed API stages").
enum IntakeCommand {
    /// `new`'s own options, listed under it.
    static let newOptions = OptionTable(column: 19, [
        .file("photo", "FILE", "a photo (repeat for more, in order; the first is the cover)"),
        Option("code", "C", "a scanned code (QR, barcode, SKU, serial, item link)"),
        Option("location", "L", "where the item is"),
        Option("gps", "LAT,LON", "decimal degrees, e.g. 48.8584,2.2945"),
        Option("receive", "N", "add N to the item's stock when the job is done"),
    ])

    /// The options of the commands that run jobs (`new`, `resume`).
    static let runOptions = OptionTable(column: 19, [
        Option("analysis-wait", "SECONDS", "how long to wait for the hub to analyse the photos",
               "(default $TALLY_ANALYSIS_WAIT, else 60); then the job", "goes on without the analysis"),
    ])

    /// The options every intake command takes.
    static let options = OptionTable(column: 19, [
        Option("outbox", "FILE", "the outbox (default $TALLY_OUTBOX, else", "$XDG_DATA_HOME/tally/outbox.sqlite, else",
               "~/.local/share/tally/outbox.sqlite); photos are kept", "beside it in <name>-photos/ until their job ends"),
        Option("json", nil, "one JSON object with the job(s) at the end"),
        Option("quiet", nil, "no stage lines on stderr"),
    ])

    static let usageNew = """
    Usage: tally intake new --photo FILE [--photo FILE …] [--code C] [--location L]
                            [--gps LAT,LON] [--receive N] [--analysis-wait SECONDS] [--json]
    """
    static let aboutNew = """
    new      copies the photos (1 to 12 JPEG, PNG, WebP, GIF or HEIC files) into
             the outbox, then runs the job's stages against the hub:
               resolve    (with --code) the item the code names, or a new one
               create     the intake record intake/<job>
               created    the new item (if any), record → created
               upload     each photo as a blob, item photos, → media-uploaded
               analyzed   waits for the hub to read the codes (and label text)
                          in the photos and move the record → analyzed;
                          shows what it found and proposes (see accept)
               cover-set  the first photo as cover, → cover-set
               done       → done; with --receive N, N more in the item's stock
             Prints the job id, then (last line) the record name intake/<job>.
    \(newOptions.help)
    \(runOptions.help)
    """
    static let aboutResume = """
    resume   continues every unfinished job for this hub (or JOB) from its last
             confirmed stage; safe to run any number of times.
    \(runOptions.help)
    """
    static let aboutStatus = """
    status   shows each job's stages (confirmed, pending, failed) and ids, and
             the hub's analysis: codes found, what each resolves to, proposals,
             and whether they were accepted.
    """
    static let aboutAccept = """
    accept   writes the analysis's proposals on the job's item (serials and
             codes added to its own, the name when one is proposed) and marks
             them accepted, in one atomic write; only the job's owner may.
             JOB: a job id, id prefix or intake/<id> (need not be in the outbox).
    """
    static let footer = """
    Options:
    \(options.help)
    \(HubAccess.options.help)

    A job is bound to the hub it was created for. A network failure leaves it
    resumable (exit 1); a refusal no retry can fix fails it and marks the
    record failed. Exit status: 0 done, 1 failed or interrupted, 2 usage error.
    """

    /// `accept`'s options: no stage lines to quiet, no jobs to run.
    static let acceptOptions = OptionTable(column: 19, options.only(["outbox"]).options + [
        Option("json", nil, "one JSON object: what was written (item, serials,", "codes, name, accepted)"),
    ])
    static let acceptFooter = """
    Options:
    \(acceptOptions.help)
    \(HubAccess.options.help)

    Exit status: 0 accepted; 1 refused (no analysis yet, nothing to accept,
    already accepted, not the job's owner) or the hub could not be reached;
    2 usage error.
    """

    /// `tally intake --help`: every subcommand.
    static let help = usageNew + "\n       tally intake resume [JOB] [--analysis-wait SECONDS] [--json]"
        + "\n       tally intake status [JOB] [--json]\n       tally intake accept JOB [--json]\n\n"
        + aboutNew + "\n" + aboutResume + "\n" + aboutStatus + "\n" + aboutAccept + "\n\n" + footer

    /// `tally intake SUB --help`: that subcommand and exactly the options it takes.
    static let subHelps: [String: String] = [
        "new": usageNew + "\n\n" + aboutNew + "\n\n" + footer,
        "resume": "Usage: tally intake resume [JOB] [--analysis-wait SECONDS] [--json]\n\n" + aboutResume + "\n\n" + footer,
        "status": "Usage: tally intake status [JOB] [--json]\n\n" + aboutStatus + "\n\n" + footer,
        "accept": "Usage: tally intake accept JOB [--json]\n\n" + aboutAccept + "\n\n" + acceptFooter,
    ]

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        guard let sub = args.first, !sub.hasPrefix("-") else {
            if args.first == "-h" { print(help); return 0 }
            // `tally intake --help` lists every subcommand's options, and takes them.
            if args.first != nil,
               try Arguments(args, command: "intake", options: newOptions, runOptions, options,
                             HubAccess.options).flag("help") {
                print(help)
                return 0
            }
            throw UsageError(message: "intake needs a subcommand: new, resume, status or accept ('tally intake --help')")
        }
        let rest = args.dropFirst()
        switch sub {
        case "new": return try new(rest)
        case "resume": return try resume(rest)
        case "status": return try status(rest)
        case "accept": return try accept(rest)
        default: throw UsageError(message: "unknown intake subcommand '\(sub)': use new, resume, status or accept")
        }
    }

    // MARK: new

    static func new(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "intake new", options: newOptions, runOptions, options, HubAccess.options)
        let photoPaths = a.strings("photo")
        if a.flag("help") { print(subHelps["new"]!); return 0 }
        try a.noPositionals("intake new")
        guard !photoPaths.isEmpty else {
            throw UsageError(message: "intake new needs at least one --photo FILE")
        }
        guard photoPaths.count <= IntakePhotos.maxCount else {
            throw UsageError(message: "an intake job takes at most \(IntakePhotos.maxCount) photos, not \(photoPaths.count)")
        }
        let photos = try photoPaths.map { (path) throws(UsageError) in
            do throws(IntakePhotos.Unusable) { return try IntakePhotos.check(path) } catch {
                throw UsageError(message: error.message)
            }
        }
        let code = try text(a, "code", max: 512)
        let location = try text(a, "location", max: 1000)
        let gps = try a.string("gps").map { (text) throws(UsageError) in try parseGPS(text) }
        let receive = try a.int("receive", in: 1...1_000_000_000)
        let wait = try analysisWait(a)
        // Refuse a token in plain text before anything is written or sent.
        let access = try checkedAccess(a)
        let outboxPath = try outboxPath(flag: a.string("outbox"))
        let json = a.flag("json")

        let outbox = try IntakeOutbox(path: outboxPath)
        let (job, lock) = try outbox.createJob(hub: access.jobHub, photos: photos, code: code, location: location,
                                               gps: gps, receive: receive) { path in
            fputs("tally: photo '\(path)' has the same bytes as an earlier one: sent once\n", stderr)
        }
        if !json {
            print("job \(job.id)")
            fflush(stdout)
        }
        IntakeCrash.point("copied")
        return try runJobs([job], outbox: outbox, access: access, json: json, quiet: a.flag("quiet"), single: true,
                           wait: wait, held: lock)
    }

    // MARK: resume

    static func resume(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "intake resume", options: runOptions, options, HubAccess.options)
        if a.flag("help") { print(subHelps["resume"]!); return 0 }
        guard a.positionals.count <= 1 else {
            throw UsageError(message: "intake resume takes at most one JOB, not \(a.positionals.count)")
        }
        let wait = try analysisWait(a)
        let access = try checkedAccess(a)
        let outboxPath = try outboxPath(flag: a.string("outbox"))
        let outbox = try IntakeOutbox(path: outboxPath)
        let hub = access.jobHub
        let json = a.flag("json"), quiet = a.flag("quiet")
        let jobs = try outbox.jobs(), plan: IntakeResumePlan
        do { plan = try IntakeResumePlan(jobs: jobs, hub: hub, wanted: a.positionals.first) } catch {
            throw failure(error, wanted: a.positionals.first ?? "", outbox: outbox)
        }
        switch plan {
        case .done(let job):
            printError("intake job \(job.id) is already done (\(job.record))")
            return json ? printJSON(job) : 0
        case .failed(let job):
            throw CommandFailure.intakeJobFailed(job)
        case .elsewhere(let job):
            throw CommandFailure.intakeJobElsewhere(job, here: hub)
        case .run(let job):
            return try runJobs([job], outbox: outbox, access: access, json: json, quiet: quiet, single: true, wait: wait)
        case .unfinished(let jobs, let elsewhere):
            for job in elsewhere {
                printError("intake job \(job.id) belongs to the hub at \(job.hub): skipped (resume it with --server \(job.hub))")
            }
            if jobs.isEmpty, !json {
                fputs("tally: no unfinished intake jobs for \(hub)\n", stderr)
                return 0
            }
            return try runJobs(jobs, outbox: outbox, access: access, json: json, quiet: quiet, single: false, wait: wait)
        }
    }

    /// Runs jobs one after another; stops at the first network failure
    /// (the next would fail the same way). Exit status 0 only if all are done.
    private static func runJobs(_ jobs: [IntakeJob], outbox: IntakeOutbox, access: HubAccess, json: Bool,
                                quiet: Bool, single: Bool, wait: Int64, held: OutboxLock? = nil) throws -> Int32 {
        let runner = IntakeRunner(outbox: outbox, access: access)
        runner.verbose = !quiet
        runner.analysisWaitMillis = wait
        runner.log = { fputs("tally: \($0)\n", stderr) }
        let progress = PhotoUploadDisplay(terminal: isatty(STDERR_FILENO) == 1) { fputs($0, stderr) }
        runner.onUpload = { progress.show($0) }
        runner.checkpoint = { IntakeCrash.point($0) }
        var summary = IntakeRunSummary()
        do {
            try runner.run(jobs, held: held) { event in
                summary.record(event)
                switch event {
                case .busy(let job):
                    printError("intake job \(job.id) is being run by another tally process right now: skipped")
                case .starting(let job):
                    if !single, !quiet { fputs("tally: resuming intake job \(job.id) at stage \(job.nextStage?.rawValue ?? "-")\n", stderr) }
                case .ran(let job, .done):
                    if !json { ClientCommands.output(line: single ? job.record : "\(job.record) done") }
                case .ran(let job, .failed(let reason)):
                    printError("intake job \(job.id) failed: \(reason)")
                    if !json { ClientCommands.output(line: job.record) }
                case .ran(let job, .interrupted(let error)):
                    printError("\(error)\nintake job \(job.id) is saved in the outbox: run 'tally intake resume' to continue it")
                    if !json { ClientCommands.output(line: job.record) }
                }
            }
        } catch {
            switch error {
            case .outbox(let error): throw error
            case .kept(let error, let job): throw CommandFailure.intakeOutbox(error, job: job)
            }
        }
        if json { output(.object(summary.json(single: single))) }
        return summary.succeeded ? 0 : 1
    }

    // MARK: Helpers

    /// `--analysis-wait SECONDS`, else `$TALLY_ANALYSIS_WAIT`, else 60 s;
    /// 0 goes on at once.
    static func analysisWait(_ a: Arguments) throws(UsageError) -> Int64 {
        let (text, source) = a.string("analysis-wait").map { ($0, "--analysis-wait") }
            ?? (environment("TALLY_ANALYSIS_WAIT").flatMap { $0.isEmpty ? nil : $0 }.map { ($0, "TALLY_ANALYSIS_WAIT") }
                ?? (nil, ""))
        guard let text else { return IntakeRunner.defaultAnalysisWaitMillis }
        guard let seconds = Double(text), seconds >= 0, seconds <= 3600 else {
            throw UsageError(message: "\(source) must be a number of seconds from 0 to 3600, not '\(text)'")
        }
        return Int64(seconds * 1000)
    }

    /// `--outbox FILE`, else `$TALLY_OUTBOX`, else the XDG data directory.
    static func outboxPath(flag: String?) throws(UsageError) -> String {
        try Arguments.dataFile(flag, option: "outbox", variable: "TALLY_OUTBOX", name: "outbox.sqlite",
                               what: "the intake outbox")
    }

    private static func text(_ a: Arguments, _ name: String, max: Int) throws(UsageError) -> String? {
        guard let value = a.string(name) else { return nil }
        guard !value.isEmpty, value.utf8.count <= max else {
            throw UsageError(message: "--\(name) must be 1 to \(max) bytes of text")
        }
        guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw UsageError(message: "--\(name) must not contain control characters")
        }
        return value
    }

    /// "LAT,LON" in decimal degrees.
    static func parseGPS(_ text: String) throws(UsageError) -> (lat: Double, lon: Double) {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        guard parts.count == 2, let lat = Double(parts[0].trimmingSpaces), let lon = Double(parts[1].trimmingSpaces),
              lat.isFinite, lon.isFinite, (-90...90).contains(lat), (-180...180).contains(lon) else {
            throw UsageError(message: "--gps must be LAT,LON in decimal degrees (latitude -90 to 90, longitude -180 to 180), e.g. 48.8584,2.2945; not '\(text)'")
        }
        return (lat, lon)
    }

    /// The hubs' addresses and token from the flags: a malformed --server is
    /// a usage error; a token that would go out in plain text to any hub of
    /// the list is refused (`HubError.insecureToken`) before anything is
    /// written or sent.
    static func checkedAccess(_ a: Arguments) throws -> HubAccess {
        let access = try HubAccess(a)
        try access.checkTransports()
        return access
    }

    static func output(_ value: JSONValue) { ClientCommands.output(value) }
}

/// Test hook: `TALLY_INTAKE_CRASH_AT=<point>` kills the process with
/// SIGKILL when it reaches that point (see `IntakeRunner.checkpoint`), so
/// tests can check that every point is recoverable.
enum IntakeCrash {
    static let target: String? = environment("TALLY_INTAKE_CRASH_AT")

    static func point(_ name: String) {
        guard target == name else { return }
        kill(getpid(), SIGKILL)
    }
}
