@preconcurrency import Glibc
import TallyConcurrency
import TallyClient
import TallyMirror
import TallyNet
import TallyProtocol

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

        let store = try MirrorStore.open(path, create: true)
        guard let lock = try MirrorRunLock.acquire(store: path) else { throw CommandFailure.mirrorRunning(store: path) }
        defer { lock.release() }

        var patterns = a.positionals
        var access = HubAccess(a)
        if patterns.isEmpty, let stored = try store.meta("patterns"),
           let list = (try? JSONValue.parse(stored))?.arrayValue?.compactMap(\.stringValue) {
            patterns = list
        }
        if access.server == nil, let hub = try store.meta("hub") { access.server = hub }
        guard !patterns.isEmpty else {
            throw UsageError(message: "mirror run needs at least one PATTERN (e.g. orders/ items/)")
        }
        let url = access.url
        try access.checkTransport(url)

        let quiet = a.flag("quiet")
        let progress = ResyncDisplay(quiet: quiet)
        let fatal = LockedValueBox<String?>(nil)
        var configuration = MirrorSync.Configuration(url: url, token: access.token,
                                                     clientID: MirrorSync.clientID(store: path), patterns: patterns)
        configuration.serverLabel = access.server ?? url
        configuration.policies = PolicyTable(policies)
        configuration.options.requestTimeoutMillis = 15_000
        configuration.options.pingIntervalMillis = 3_000
        configuration.options.idleTimeoutMillis = 10_000
        configuration.options.connectTimeoutMillis = 6_000
        let fetchAccess = access
        configuration.fetchWorkflows = { WorkflowCatalog.fetchJSON(fetchAccess) }
        configuration.progress = { progress.show($0) }
        configuration.log = { line in if !quiet { progress.log(line) } }
        configuration.fatal = { message in
            fatal.withLock { $0 = message }
            kill(getpid(), SIGUSR1)
        }
        let sync: MirrorSync
        do { sync = try MirrorSync(store: store, configuration: configuration) } catch {
            throw CommandFailure.mirrorStart(error)
        }
        if !quiet {
            fputs("tally: mirroring \(patterns.joined(separator: " ")) from \(url) into \(path)\n", stderr)
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

/// Resync progress on stderr: a bar redrawn in place on a terminal, a line
/// per phase otherwise (and one when a counted phase is complete); steps
/// too small to matter (`ResyncState.worthShowing`) are not shown. The
/// run's log lines go through here too, so they never land inside a bar.
final class ResyncDisplay: Sendable {
    private let isTerminal = isatty(STDERR_FILENO) == 1
    private let quiet: Bool
    private let state = LockedValueBox<(key: String, percent: Int, done: Int, drawn: Bool)>(("", -1, -1, false))

    init(quiet: Bool) { self.quiet = quiet }

    func show(_ progress: ResyncState?) {
        guard !quiet else { return }
        state.withLock { state in
            guard let progress, progress.worthShowing else {
                if state.drawn { fputs("\n", stderr) }
                state = ("", -1, -1, false)
                return
            }
            let key = "\(progress.phase.rawValue) \(progress.target ?? "")"
            let percent = progress.percent ?? -1
            let complete = percent == 100
            if isTerminal {
                guard key != state.key || percent != state.percent || (percent < 0 && progress.done != state.done) else { return }
                var line = "resync: \(progress.summary)"
                if percent >= 0 {
                    let width = 30
                    let filled = width * percent / 100
                    line = "resync [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(progress.summary)"
                }
                fputs("\r\(line)\u{1B}[K", stderr)
                state.drawn = true
                if complete {
                    fputs("\n", stderr)
                    state.drawn = false
                }
            } else if key != state.key || (complete && state.percent != 100) {
                fputs("tally: resync: \(progress.summary)\n", stderr)
            }
            state.key = key
            state.percent = percent
            state.done = progress.done
        }
    }

    func log(_ line: String) {
        state.withLock { state in
            if state.drawn {
                fputs("\n", stderr)
                state.drawn = false
            }
            fputs("tally: mirror: \(line)\n", stderr)
        }
    }
}
