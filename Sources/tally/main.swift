@preconcurrency import Glibc
import TallyCommandLine

/// The `tally` command: one type per subcommand, declared once here for
/// both the dispatch and the Commands section of the usage.
let commands: [(name: String, about: String, run: (ArraySlice<String>) throws -> Int32)] = [
    ("serve", "run the hub (HTTP + WebSocket on one port)", ServeCommand.run),
    ("backup", "copy a running hub's store and photos into a new directory", BackupCommand.run),
    ("restore", "put a backup in place of a data directory's store", RestoreCommand.run),
    ("get", "print a record (or one path in it)", { try ClientCommands.run("get", $0) }),
    ("set", "set a record, or one value at a path", { try ClientCommands.run("set", $0) }),
    ("del", "delete a record, or one value at a path", { try ClientCommands.run("del", $0) }),
    ("watch", "print every change to a record or a prefix", { try ClientCommands.run("watch", $0) }),
    ("list", "show a list, add or remove entries", { try ClientCommands.run("list", $0) }),
    ("emit", "publish an event on a topic", { try ClientCommands.run("emit", $0) }),
    ("on", "print the events published on a topic", { try ClientCommands.run("on", $0) }),
    ("order", "stock orders: new, advance, cancel, ls", OrderCommand.run),
    ("intake", "intake jobs with photos: new, resume, status, accept", IntakeCommand.run),
    ("resolve", "find the item a code (QR, barcode, SKU, serial) names", ResolveCommand.run),
    ("mirror", "an offline mirror: run, get, set, del, ls, status, conflicts", MirrorCommand.run),
    ("verify", "compare a mirror with the hub", VerifyCommand.run),
    ("echo-check", "check a WebSocket echo endpoint message by message", EchoCheckCommand.run),
    ("bench", "benchmarks: echo round trips, idle connection memory", BenchCommand.run),
    ("help", "show this help; 'tally help <command>' for a command's", { args in
        // Takes no options; `tally help CMD` is `tally CMD --help`.
        let a = try Arguments(args, command: "help")
        guard let name = a.positionals.first else { print(usage); return 0 }
        guard a.positionals.count == 1, let entry = commands.first(where: { $0.name == name && $0.name != "help" }) else {
            throw UsageError(message: "tally help takes one command name, e.g. tally help order")
        }
        return try entry.run(["--help"])
    }),
]

let usage = "Usage: tally <command> [options]\n\nCommands:\n"
    + commands.map { "  " + $0.name.padding(to: 15) + $0.about }.joined(separator: "\n")
    + "\n\nExit status: 0 success, 1 failure, 2 usage error."

let version = "0.3.0"
let command = CommandLine.arguments.dropFirst().first
let status: Int32
do {
    switch command {
    case nil, "--help", "-h":
        print(usage)
        status = 0
    case "--version", "version":
        print("tally \(version)")
        status = 0
    case let name?:
        guard let entry = commands.first(where: { $0.name == name }) else {
            throw UsageError(message: "unknown command '\(name)'")
        }
        status = try entry.run(CommandLine.arguments.dropFirst(2))
    }
} catch {
    status = Failure.report(error, command: command ?? "")
}
exit(status)
