@preconcurrency import Glibc
import TallyClient
import TallyMirror
import TallyProtocol
import TallyCommandLine

/// `tally mirror run|get|set|del|ls|status|conflicts`: a local SQLite copy
/// of part of the hub that keeps working while the hub is away (see
/// docs/mirror.md). Everything here only parses and prints; the store,
/// outbox, merge and sync live in TallyMirror.
enum MirrorCommand {
    static let storeOptions = OptionTable(column: 17, [
        Option("store", "FILE", "the mirror's SQLite file (default $TALLY_MIRROR, else",
               "$XDG_DATA_HOME/tally/mirror.sqlite, else", "~/.local/share/tally/mirror.sqlite)"),
    ])

    /// The local commands' options, described in each one's help.
    static let options = OptionTable(column: 0, [
        Option("path", "P"), Option("if-version", "N"), Option("idem", "KEY"), Option("take", "SIDE"),
        Option("reason", "TEXT"), Option("json"), Option("lists"), Option("all"),
    ])

    /// The options of `options` each local command takes (its help names
    /// them); the parser accepts exactly these and `--store`.
    static let takes: [String: Set<String>] = [
        "get": ["path", "json"], "set": ["if-version", "idem", "reason", "json"], "del": ["if-version", "idem", "json"],
        "ls": ["lists", "json"], "status": ["json"], "conflicts": ["all", "take", "json"],
    ]

    static let usage = """
    Usage: tally mirror <command> [--store FILE] [options]

    A local copy of the records and lists under some prefixes, kept current
    by 'tally mirror run', readable and writable whether or not the hub is
    reachable. Local writes wait in an outbox and reach the hub exactly once;
    when the hub moved on meanwhile they are merged field by field.

    Commands:
      run        keep the mirror current and replay the outbox (runs until stopped)
      get        print a record from the mirror
      set        write a record (or a value at a path) locally; sent when online
      del        delete a record (or a value at a path) locally
      ls         list the mirrored records under a prefix
      status     online/offline, hub, last seq, outbox depth, conflicts, last error
      conflicts  list recorded conflicts; 'conflicts resolve ID --take local|hub'

    Run 'tally mirror <command> --help' for a command's options.
    See also 'tally verify' to compare a mirror with the hub.

    \(storeOptions.help)
    """

    static let helps: [String: String] = [
        "run": """
        Usage: tally mirror run --store FILE [--policy PREFIX=hub|client|both …] PATTERN…

        Keeps a local mirror of every record and list matching the patterns
        current, and replays the outbox of local writes, until interrupted
        (SIGINT/SIGTERM stop it cleanly; a killed run resumes where it was).

        PATTERN is a prefix ending in '/' (orders/, intake/, items/), which also
        brings the workflow's list (orders, intake), or a name, which mirrors
        that record and the list of that name. Without patterns, the ones of
        the last run on this store are used.

        Through outages it keeps reconnecting (backoff 250 ms doubling to 30 s,
        full jitter). On reconnect it pulls exactly the changes missed since the
        last seq it applied (or a fresh snapshot when the hub's log no longer
        reaches back), then sends the outbox in order, each write with its
        idempotency key and the version it was based on. The phases of a
        resync (waiting, connecting, receiving, applying, replaying) and how far
        each has come go to stderr and to 'tally mirror status'.

        \(MirrorRunCommand.options.help)

        Only one 'mirror run' works on a store at a time.
        """,
        "get": """
        Usage: tally mirror get NAME [--path P] [--json] [--store FILE]

        Prints the mirror's copy of a record (or the value at --path), with
        its local writes applied, whether or not the hub is reachable. With
        --json: {"name","version","seq","data","pending"} where version and seq
        are the hub's copy's and pending says whether local writes wait in
        the outbox. A record the mirror does not have: exit 1 (not_found).
        """,
        "set": """
        Usage: tally mirror set NAME [PATH] VALUE [--if-version N] [--idem KEY] [--reason TEXT] [--json] [--store FILE]

        Like 'tally set', against the mirror: the write applies to the local copy
        at once and waits in the outbox until 'tally mirror run' sends it. VALUE
        is JSON (a bare word is a string); without PATH it is the whole record.
        Setting the stage of a workflow record (orders/…, intake/…) moves it
        with an advance, checked against the workflow's transitions.
          --if-version N   refuse unless the local copy is based on hub version N
                           (0: the hub has no such record as far as the mirror knows)
          --idem KEY       the idempotency key (default: a fresh random one)
          --reason TEXT    kept with a stage change (an intake job's move to
                           failed needs one)
        Prints NAME and the outbox depth; --json adds "pending": true.
        """,
        "del": """
        Usage: tally mirror del NAME [PATH] [--if-version N] [--idem KEY] [--json] [--store FILE]

        Like 'tally del', against the mirror: deletes the local copy of the
        record (or the value at PATH) at once; the hub follows when online.
        """,
        "ls": """
        Usage: tally mirror ls [PREFIX] [--lists] [--json] [--store FILE]

        Lists the mirrored records under PREFIX (default: all) in name order,
        marking those with local writes waiting. --lists lists the mirrored
        lists instead. --json: {"records":[{"name","version","seq","data","pending"}…]}
        (or {"lists":[{"list","version","seq","entries"}…]}).
        """,
        "status": """
        Usage: tally mirror status [--json] [--store FILE]

        Whether a 'mirror run' is connected (online/offline), the hub, the last
        seq applied, writes waiting in the outbox, writes the hub refused,
        open conflicts, the last error and, while the run resyncs, its phase
        and progress (waiting, connecting, receiving, applying, replaying).
        Each refused write is listed with the hub's reason (it stays in the
        outbox as failed). --json keys: online, running, server, lastSeq,
        outbox, failed, refused ([{"id","name","op","error"}…], oldest
        first), conflicts, lastError, lastErrorAt, patterns, client, store, resync
        ({"phase","target","done","total"}; total null when not known; null
        when no resync runs).
        """,
        "conflicts": """
        Usage: tally mirror conflicts [--all] [--json] [--store FILE]
               tally mirror conflicts resolve ID --take local|hub [--json] [--store FILE]

        Lists the conflicts recorded under a 'both' policy (a field changed here
        and on the hub; the hub's value was kept): ID, record, field, both values.
        --all includes resolved ones. 'resolve' settles one: --take local writes
        the mirror's value (through the outbox), --take hub keeps the hub's;
        either way the conflicts/<ID> record on the hub is marked resolved.
        A conflict resolved on the hub instead (the dashboard, or "resolved":
        true and "take" set on conflicts/<ID>) is closed here by the running
        'mirror run', which writes the mirror's value only if the hub lacks it.
        """,
    ]

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        guard let sub = args.first, !sub.hasPrefix("-") else {
            if args.first == "-h" { print(usage); return 0 }
            // Checked like a command's: `tally mirror --help --json` is refused.
            if try Arguments(args, command: "mirror", options: storeOptions).flag("help") {
                print(usage)
                return 0
            }
            throw UsageError(message: "mirror needs a command: run, get, set, del, ls, status or conflicts")
        }
        let rest = args.dropFirst()
        switch sub {
        case "run":
            return try MirrorRunCommand.run(rest)
        case "get", "set", "del", "ls", "status", "conflicts":
            let a = try Arguments(rest, command: "mirror \(sub)", options: options.only(takes[sub]!), storeOptions)
            if a.flag("help") {
                print(helps[sub]! + "\n\n" + storeOptions.help)
                return 0
            }
            return try perform(sub, a)
        case "help":
            print(usage)
            return 0
        default:
            throw UsageError(message: "unknown mirror command '\(sub)'; use run, get, set, del, ls, status or conflicts")
        }
    }

    /// `--store`, else `$TALLY_MIRROR`, else the XDG data directory.
    static func storePath(_ a: Arguments) throws(UsageError) -> String {
        try Arguments.dataFile(a.string("store"), option: "store", variable: "TALLY_MIRROR", name: "mirror.sqlite",
                               what: "the mirror store")
    }

    /// Runs one command; its refused names and paths are reported against
    /// `mirror SUB` (`Run 'tally mirror get --help'`).
    static func perform(_ sub: String, _ a: Arguments) throws(UsageError) -> Int32 {
        try Failure.run("mirror \(sub)") {
            let path = try storePath(a)
            switch sub {
            case "get": try get(a, path)
            case "set": try set(a, path)
            case "del": try del(a, path)
            case "ls": try ls(a, path)
            case "status": try status(a, path)
            default: try conflicts(a, path)
            }
            return 0
        }
    }

    static func parsePath(_ text: String) throws(UsageError) -> RecordPath {
        do { return try RecordPath(parsing: text) } catch {
            throw UsageError(message: "'\(text)' is not a path: \(error.message)")
        }
    }

    // MARK: Reads

    static func get(_ a: Arguments, _ path: String) throws {
        let p = a.positionals
        guard p.count == 1 else { throw UsageError(message: "mirror get needs exactly one record name") }
        try Names.validate(p[0], field: "NAME")
        let copy = try MirrorStore.open(path, create: false).localCopy(p[0])
        let at = try a.string("path").map { (text) throws(UsageError) in (try parsePath(text), text) }
        let (envelope, value) = try copy.envelope(at: at)
        ClientCommands.output(a.flag("json") ? .object(envelope) : value, pretty: !a.flag("json"))
    }

    static func ls(_ a: Arguments, _ path: String) throws {
        let p = a.positionals
        guard p.count <= 1 else { throw UsageError(message: "mirror ls takes at most one PREFIX") }
        let prefix = p.first ?? ""
        if !prefix.isEmpty { try Names.validatePrefix(prefix, field: "PREFIX") }
        let store = try MirrorStore.open(path, create: false)
        if a.flag("lists") {
            let lists = try store.lists(prefix: prefix)
            if a.flag("json") { return ClientCommands.output(.object(["lists": .array(lists.map { .object($0.json) })])) }
            for list in lists { print("\(list.name)  v\(list.version)  \(list.entries.count) entries") }
            return
        }
        let records = try store.records(prefix: prefix)
        let pendingNames = try store.pendingNames()
        if a.flag("json") {
            return ClientCommands.output(.object(["records": .array(records.map {
                .object($0.json(pending: pendingNames.contains($0.name)))
            })]))
        }
        for record in records {
            print("\(record.name)  v\(record.version)\(pendingNames.contains(record.name) ? "  pending" : "")")
        }
    }

    // MARK: Writes

    static func set(_ a: Arguments, _ path: String) throws {
        let p = a.positionals
        guard p.count == 2 || p.count == 3 else {
            throw UsageError(message: "mirror set needs NAME [PATH] VALUE, e.g. tally mirror set orders/42 stage ready")
        }
        try Names.validate(p[0], field: "NAME")
        let value = ClientCommands.parseValue(p[p.count - 1])
        if p.count == 3 {
            _ = try parsePath(p[1])
        } else if case .object = value {
        } else {
            throw UsageError(message: "a whole record is a JSON object, e.g. '{\"stage\":\"ready\"}'; to set one field give a PATH")
        }
        try write(a, path, .set(name: p[0], path: p.count == 3 ? p[1] : nil, value: value))
    }

    static func del(_ a: Arguments, _ path: String) throws {
        let p = a.positionals
        guard p.count == 1 || p.count == 2 else { throw UsageError(message: "mirror del needs NAME [PATH]") }
        try Names.validate(p[0], field: "NAME")
        if p.count == 2 { _ = try parsePath(p[1]) }
        try write(a, path, .delete(name: p[0], path: p.count == 2 ? p[1] : nil))
    }

    private static func write(_ a: Arguments, _ path: String, _ command: LocalCommand) throws {
        let ifVersion = try ClientCommands.ifVersion(a)
        let idem = a.string("idem")
        if let idem, idem.isEmpty || idem.utf8.count > 200 {
            throw UsageError(message: "--idem must be 1 to 200 bytes")
        }
        let store = try MirrorStore.open(path, create: true)
        let result = try store.write(command, ifVersion: ifVersion, idem: idem, reason: a.string("reason"))
        if a.flag("json") { return ClientCommands.output(.object(result.json)) }
        print("\(result.name) pending (outbox \(result.outbox); based on version \(result.version))")
    }

    // MARK: Status and conflicts

    static func status(_ a: Arguments, _ path: String) throws {
        guard a.positionals.isEmpty else { throw UsageError(message: "mirror status takes no arguments") }
        let status = try MirrorStatus.read(store: path)
        if a.flag("json") { return ClientCommands.output(.object(status.json)) }
        status.lines.forEach { print($0) }
    }

    static func conflicts(_ a: Arguments, _ path: String) throws {
        let p = a.positionals
        if p.first == "resolve" {
            guard p.count == 2 else { throw UsageError(message: "conflicts resolve needs an ID and --take local|hub") }
            guard let take = a.string("take"), take == "local" || take == "hub" else {
                throw UsageError(message: "conflicts resolve needs --take local or --take hub")
            }
            let store = try MirrorStore.open(path, create: false)
            let mirror = try store.meta("client") ?? "mirror:\(path)"
            let conflict = try store.resolveConflict(p[1], take: take == "local" ? .client : .hub, mirror: mirror)
            if a.flag("json") { return ClientCommands.output(.object(conflict.json)) }
            print("conflict \(conflict.id) resolved: \(conflict.name) \(conflict.field) takes the \(take == "local" ? "mirror's" : "hub's") value"
                  + (take == "local" ? " (sent when online)" : ""))
            return
        }
        guard p.isEmpty else { throw UsageError(message: "mirror conflicts takes no arguments (or: resolve ID --take local|hub)") }
        let store = try MirrorStore.open(path, create: false)
        let list = try store.conflicts(includeResolved: a.flag("all"))
        if a.flag("json") { return ClientCommands.output(.object(["conflicts": .array(list.map { .object($0.json) })])) }
        if list.isEmpty { return print("no \(a.flag("all") ? "" : "open ")conflicts") }
        list.forEach { print($0.line) }
    }
}
