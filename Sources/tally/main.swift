@preconcurrency import Glibc

/// The `tally` command: dispatches to one command type per subcommand.
let usage = """
Usage: tally <command> [options]

Commands:
  serve          run the hub (HTTP + WebSocket on one port)
  backup         copy a running hub's store and photos into a new directory
  restore        put a backup in place of a data directory's store
  get            print a record (or one path in it)
  set            set a record, or one value at a path
  del            delete a record, or one value at a path
  watch          print every change to a record or a prefix
  list           show a list, add or remove entries
  emit           publish an event on a topic
  on             print the events published on a topic
  order          stock orders: new, advance, cancel, ls
  intake         intake jobs with photos: new, resume, status
  resolve        find the item a code (QR, barcode, SKU, serial) names
  mirror         an offline mirror: run, get, set, del, ls, status, conflicts
  verify         compare a mirror with the hub
  echo-check     check a WebSocket echo endpoint message by message
  bench          benchmarks: echo round trips, idle connection memory
  help           show this help; 'tally <command> --help' for a command

Exit status: 0 success, 1 failure, 2 usage error.
"""

let version = "0.3.0"
let args = CommandLine.arguments
let command = args.dropFirst().first
let status: Int32
do {
    switch command {
    case nil, "help", "--help", "-h":
        print(usage)
        status = 0
    case "--version", "version":
        print("tally \(version)")
        status = 0
    case "serve":
        status = try ServeCommand.run(args.dropFirst(2))
    case "backup":
        status = try BackupCommand.run(args.dropFirst(2))
    case "restore":
        status = try RestoreCommand.run(args.dropFirst(2))
    case "echo-check":
        status = try EchoCheckCommand.run(args.dropFirst(2))
    case "get", "set", "del", "watch", "list", "emit", "on":
        status = try ClientCommands.run(args[1], args.dropFirst(2))
    case "order":
        status = try OrderCommand.run(args.dropFirst(2))
    case "intake":
        status = try IntakeCommand.run(args.dropFirst(2))
    case "resolve":
        status = try ResolveCommand.run(args.dropFirst(2))
    case "mirror":
        status = try MirrorCommand.run(args.dropFirst(2))
    case "verify":
        status = try VerifyCommand.run(args.dropFirst(2))
    case "bench":
        status = try BenchCommand.run(args.dropFirst(2))
    case let other?:
        throw UsageError(message: "unknown command '\(other)'")
    }
} catch {
    status = Failure.report(error, command: command ?? "")
}
exit(status)
