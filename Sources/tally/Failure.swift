import TallyClient
import TallyIntake
import TallyMirror

/// The one mapping from every error a command ends with to the message
/// printed (`tally: …` on stderr) and the exit status: usage mistakes 2,
/// everything else `failure` (1, or 3 for `verify`, whose 1 means "differs").
enum Failure {
    /// Prints the error's message and returns its exit status. Usage errors
    /// are not handled here: they go up to `main`, which adds the hint.
    static func report(_ error: any Error, command: String, failure: Int32 = 1) -> Int32 {
        switch error {
        case let error as ProtocolError:
            // A name or path the command was given, refused before sending.
            printError("\(error.message)\nRun 'tally \(command) --help' for usage.")
            return 2
        default:
            printError(message(error))
            return failure
        }
    }

    /// What the CLI says for an error.
    static func message(_ error: any Error) -> String {
        switch error {
        case let error as HubError: error.description
        case let error as UsageError: error.message
        case let error as OutboxError: error.message
        case let error as MirrorStoreError: error.message
        default: "\(error)"
        }
    }
}
