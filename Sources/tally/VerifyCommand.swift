@preconcurrency import Glibc
import TallyClient
import TallyMirror
import TallyNet
import TallyProtocol
import TallyCommandLine

/// `tally verify`: compares a mirror with the hub, record by record.
enum VerifyCommand {
    static let help = """
    Usage: tally verify --store FILE [--server URL] [--json]

    Compares every record and list a mirror holds (under the patterns of its
    'mirror run') with the hub, and prints each difference: records only on
    the hub, only in the mirror, or with different data (naming the fields)
    or versions. Local writes still waiting in the outbox show as differences.

    Without --server, the hub the mirror last ran against is used.
    Exit status: 0 mirror and hub agree, 1 they differ, 2 usage error,
    3 the comparison could not be made (hub unreachable, no such store).
    --json: {"equal": bool, "differences": [{"name","list","kind","fields",
    "mirrorVersion","hubVersion"}…], "outbox": N}
    """

    /// `--json` is described above.
    static let options = OptionTable(column: 0, [Option("json")])

    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "verify", options: options, MirrorCommand.storeOptions, HubAccess.options)
        if a.flag("help") {
            print(help + "\n\n" + MirrorCommand.storeOptions.help + "\n" + HubAccess.options.help)
            return 0
        }
        try a.noPositionals("verify")
        let path = try MirrorCommand.storePath(a)
        return try Failure.run("verify", failure: 3) {
            let (differences, patterns, depth) = try MirrorComparison.verify(store: path, access: HubAccess(a))
            if a.flag("json") {
                ClientCommands.output(.object(MirrorComparison.json(differences, outbox: depth)))
            } else {
                for difference in differences { print(difference.description) }
                print(MirrorComparison.summary(differences, outbox: depth, store: path, patterns: patterns))
            }
            return differences.isEmpty ? 0 : 1
        }
    }
}
