@preconcurrency import Glibc
import TallyConcurrency
import TallyClient
import TallyMirror
import TallyNet
import TallyProtocol
import TallyCommandLine

/// `tally mirror run`: starts `MirrorSync` on the store and waits for
/// SIGINT/SIGTERM (or a fatal store error).
enum MirrorRunCommand {
    static let options = OptionTable(column: 27, [
        Option("policy", "PREFIX=POLICY", "who wins a field both sides changed under",
               "PREFIX: hub (default), client, or both (keep", "the hub's value and record a conflict, here",
               "and as a conflicts/<id> record on the hub).", "Stage fields of workflows never move back:",
               "the furthest legally reachable stage wins."),
        Option("quiet", nil, "no progress bar or log lines on stderr"),
    ])

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "mirror run", options: options, MirrorCommand.storeOptions, HubAccess.options)
        if a.flag("help") {
            print(MirrorCommand.helps["run"]! + "\n\n" + MirrorCommand.storeOptions.help + "\n" + HubAccess.options.help)
            return 0
        }
        var policies: [String: MergePolicy] = [:]
        for text in a.strings("policy") {
            guard let (prefix, policy) = PolicyTable.parse(text) else {
                throw UsageError(message: "--policy takes PREFIX=hub|client|both (e.g. notes/=both), not '\(text)'")
            }
            if !prefix.isEmpty {
                do { try Names.validatePrefix(prefix, field: "PREFIX") } catch { throw error.usage }
            }
            policies[prefix] = policy
        }
        for pattern in a.positionals where !pattern.isEmpty {
            do {
                if pattern.hasSuffix("/") { try Names.validatePrefix(pattern, field: "PATTERN") } else {
                    try Names.validate(pattern, field: "PATTERN")
                }
            } catch {
                throw error.usage
            }
        }
        let path = try MirrorCommand.storePath(a)

        // Signals are taken by sigwait on this thread: block them before any
        // other thread starts so every thread inherits the mask.
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGUSR1] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_BLOCK, &signals, nil)

        let run = try MirrorRun(store: path, patterns: a.positionals, access: HubAccess(a))
        defer { run.release() }
        let quiet = a.flag("quiet")
        let display = LockedValueBox(ResyncDisplay(terminal: isatty(STDERR_FILENO) == 1))
        let fatal = LockedValueBox<String?>(nil)
        var configuration = run.configuration(policies: PolicyTable(policies))
        configuration.progress = { progress in if !quiet { display.withLock { _ = fputs($0.show(progress), stderr) } } }
        configuration.log = { line in if !quiet { display.withLock { _ = fputs($0.log(line), stderr) } } }
        configuration.fatal = { message in
            fatal.withLock { $0 = message }
            kill(getpid(), SIGUSR1)
        }
        let sync: MirrorSync
        do { sync = try MirrorSync(store: run.store, configuration: configuration) } catch {
            throw CommandFailure.mirrorStart(error)
        }
        if !quiet {
            fputs("tally: mirroring \(run.patterns.joined(separator: " ")) from \(run.access.url) into \(path)\n", stderr)
        }
        sync.start()

        var received: Int32 = 0
        while sigwait(&signals, &received) != 0 {}
        sync.stop()
        if let message = fatal.withLock({ $0 }) { throw CommandFailure.mirrorStopped(message) }
        if !quiet { fputs("tally: mirror run stopped (\(received == SIGINT ? "interrupted" : "terminated")); the store is consistent\n", stderr) }
        return 0
    }
}
