@preconcurrency import Glibc
import TallyClient
import TallyIntake
import TallyMirror
import TallyServer
import TallyTLS
import TallyCommandLine

/// A failure the CLI itself words: a setting the arguments named that
/// cannot be used, a step of a longer command that failed.
enum CommandFailure: Error {
    /// `serve --config FILE` that cannot be read or is not valid (exit 2).
    case configFile(path: String, HubConfigFile.Invalid)
    /// Open mode on an address that is not loopback without `--open` (exit 2).
    case unauthenticatedNetwork(host: String)
    /// `serve --tls-cert/--tls-key` files that cannot be used.
    case certificate(TLSError)
    /// The client side of TLS (`echo-check --ca/--insecure`) cannot be set up.
    case clientTLS(TLSError)
    /// A benchmark, or one of its rows (`label`), could not run; its error
    /// as it describes itself.
    case benchmark(String?, any Error)
    /// The mirror's sync could not start (a URL the client cannot use).
    case mirrorStart(MirrorError)
    /// The mirror's sync stopped for good (its store failed).
    case mirrorStopped(String)
    /// `intake status JOB` without an outbox file.
    case noIntakeOutbox(job: String, path: String)
    /// No job in the outbox has that id (or id prefix).
    case noIntakeJob(String, outbox: String)
    /// `intake resume JOB` of a job that failed for good.
    case intakeJobFailed(IntakeJob)
    /// `intake resume JOB` of a job bound to another hub than `here`.
    case intakeJobElsewhere(IntakeJob, here: String)
    /// The outbox could not record a job's progress; the job is kept.
    case intakeOutbox(OutboxError, job: String)
    /// `intake accept` wrote nothing, and why.
    case intakeAccept(IntakeAcceptRefusal)
}

/// The one mapping from every error a command ends with to the message
/// printed (`tally: …` on stderr) and the exit status: usage mistakes,
/// refused names and paths, and a hub setting that cannot be served (its
/// config file, an unauthenticated network) 2; everything else `failure`
/// (1, or 3 for `verify`, whose 1 means "differs").
enum Failure {
    /// Prints the error's message and returns its exit status.
    /// - Parameter command: the command a refused argument is reported
    ///   against (`Run 'tally <command> --help' for usage.`).
    static func report(_ error: any Error, command: String, failure: Int32 = 1) -> Int32 {
        switch error {
        case let error as UsageError:
            printError("\(error.message)\nRun 'tally --help' for usage.")
            return 2
        case let error as ProtocolError:
            // A name or path the command was given, refused before sending.
            return usage(error, command: command)
        case MirrorError.refused(let refusal) where [.badPath, .badField, .badName].contains(refusal.code):
            return usage(refusal, command: command)
        case MirrorRun.Refusal.noPatterns:
            printError("mirror run needs at least one PATTERN (e.g. orders/ items/)\nRun 'tally --help' for usage.")
            return 2
        case CommandFailure.configFile, CommandFailure.unauthenticatedNetwork:
            printError(message(error))
            return 2
        default:
            printError(message(error))
            return failure
        }
    }

    /// Runs a command's body, reporting what it throws against `command`
    /// (see `report`); usage mistakes go up to `main`, which reports them.
    static func run(_ command: String, failure: Int32 = 1, _ body: () throws -> Int32) throws(UsageError) -> Int32 {
        do {
            return try body()
        } catch let error as UsageError {
            throw error
        } catch {
            return report(error, command: command, failure: failure)
        }
    }

    /// Prints a failure that does not end the command (one row of a
    /// benchmark): the command's exit status says it later.
    static func warn(_ error: any Error) {
        printError(message(error))
    }

    private static func usage(_ error: ProtocolError, command: String) -> Int32 {
        printError("\(error.message)\nRun 'tally \(command) --help' for usage.")
        return 2
    }

    /// What the CLI says for an error.
    static func message(_ error: any Error) -> String {
        switch error {
        case let error as HubError: error.description
        case let error as UsageError: error.message
        case let error as OutboxError: error.message
        case let error as MirrorStoreError: error.message
        case let error as MirrorError: error.description
        case MirrorRun.Refusal.busy(let store):
            "another 'tally mirror run' is using \(store) (only one may run per store); 'tally mirror status --store \(store)' shows it"
        case let error as HubStartError:
            error.isAboutTheDataDirectory ? "\(error)" : "cannot start the hub: \(error)"
        case let error as CommandFailure: message(error)
        default: "\(error)"
        }
    }

    private static func message(_ failure: CommandFailure) -> String {
        switch failure {
        case .configFile(let path, let error):
            "bad config file \(path): \(error)"
        case .unauthenticatedNetwork(let host):
            "refusing to serve \(host) without authentication: anyone who can reach it could change everything. Add users to a --config file (README, \"Config file\"), bind 127.0.0.1, or pass --open if this network is trusted"
        case .certificate(let error):
            "cannot use the TLS certificate: \(error.message)"
        case .clientTLS(let error):
            "cannot set up TLS: \(error.message)"
        case .benchmark(let label, let error):
            label.map { "\($0): \(error)" } ?? "\(error)"
        case .mirrorStart(let error):
            error.description
        case .mirrorStopped(let reason):
            "mirror run stopped: \(reason)"
        case .noIntakeOutbox(let job, let path):
            "no intake job '\(job)': there is no outbox at \(path) (see --outbox)"
        case .noIntakeJob(let job, let outbox):
            "no intake job '\(job)' in the outbox \(outbox) (see 'tally intake status')"
        case .intakeJobFailed(let job):
            "intake job \(job.id) failed and cannot be resumed: \(job.reason ?? "no reason recorded"); start a new job with 'tally intake new'"
        case .intakeJobElsewhere(let job, let here):
            "intake job \(job.id) belongs to the hub at \(job.hub), not \(here): run 'tally intake resume \(job.id) --server \(job.hub)'"
        case .intakeOutbox(let error, let job):
            "\(error.message); the job is kept: run 'tally intake resume \(job)' once this is fixed"
        case .intakeAccept(let refusal):
            refusal.message
        }
    }
}

func printError(_ message: String) {
    fputs("tally: \(message)\n", stderr)
}
