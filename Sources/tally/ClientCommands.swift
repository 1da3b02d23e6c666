@preconcurrency import Glibc
import TallyClient
import TallyCommandLine

/// `tally get|set|del|watch|list|emit|on`: the hub's operations from the shell.
enum ClientCommands {
    /// What every client command takes besides `HubAccess.options`.
    static let options = OptionTable(column: 17, [
        Option("json", nil, "machine-readable output (one JSON object per line)"),
        // Described in each command's usage line and help.
        Option("path", "P"), Option("since", "SEQ"), Option("if-version", "N"), Option("idem", "KEY"), Option("at", "I"),
    ])

    static let commonOptions = "Common options:\n\(HubAccess.options.help)\n\(options.help)"

    /// The options of `options` each command takes (its help names them):
    /// the parser accepts exactly these, `--json` and `HubAccess.options`.
    static let takes: [String: Set<String>] = [
        "get": ["json", "path"], "set": ["json", "if-version", "idem"], "del": ["json", "if-version", "idem"],
        "watch": ["json", "path", "since"], "list": ["json", "at"], "emit": ["json"], "on": ["json"],
    ]

    static let helps: [String: String] = [
        "get": "Usage: tally get NAME [--path P] [--json]\n\nPrints the record's data (or the value at --path). With --json: {\"name\",\"version\",\"seq\",\"data\"}.",
        "set": "Usage: tally set NAME [PATH] VALUE [--if-version N] [--idem KEY] [--json]\n\nSets the whole record (VALUE is a JSON object) or the value at PATH (dot and\nbracket syntax: items[2].qty). VALUE is JSON; a bare word is taken as a string.\n  --if-version N   refuse unless the record is at version N (0: must not exist)\n  --idem KEY       idempotency key: a retry with the same key applies once",
        "del": "Usage: tally del NAME [PATH] [--if-version N] [--idem KEY] [--json]\n\nDeletes the record, or the value at PATH.",
        "watch": "Usage: tally watch NAME|PREFIX/ [--path P] [--since SEQ] [--json]\n\nPrints each change to a record (or to every record under a prefix ending in\n'/') until interrupted; reconnects and resumes after a lost connection.\n  --path P     only changes under this path of the record\n  --since SEQ  first replay the changes after SEQ",
        "list": "Usage: tally list show|add|remove LIST [ENTRY] [--at I] [--json]\n\nShows a list's entries, adds an entry (at index I, default the end), or\nremoves an entry (every occurrence, or the one at --at).",
        "emit": "Usage: tally emit TOPIC JSON\n\nPublishes an event (not stored) to the topic's subscribers.",
        "on": "Usage: tally on TOPIC [--json]\n\nPrints each event published to TOPIC until interrupted.",
    ]

    static func run(_ command: String, _ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: command, options: options.only(takes[command] ?? ["json"]), HubAccess.options)
        if a.flag("help") {
            print(helps[command]! + "\n\n" + commonOptions)
            return 0
        }
        switch command {
        case "get": try get(a)
        case "set": try set(a)
        case "del": try del(a)
        case "watch": try watch(a)
        case "list": try list(a)
        case "emit": try emit(a)
        default: try on(a)
        }
        return 0
    }

    // MARK: Commands

    static func get(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 1 else { throw UsageError(message: "get needs exactly one record name") }
        try Names.validate(p[0], field: "NAME")
        var message: JSONObject = ["op": "get", "name": .string(p[0])]
        if let path = a.string("path") { message["path"] = .string(path) }
        let reply = try BlockingTallyClient.ask(HubAccess(a), message)
        if a.flag("json") {
            output(.object(reply))
        } else {
            output(reply["path"] != nil ? reply["value"] ?? .null : reply["data"] ?? .null, pretty: true)
        }
    }

    static func set(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 2 || p.count == 3 else {
            throw UsageError(message: "set needs NAME [PATH] VALUE, e.g. tally set orders/42 stage ready")
        }
        try Names.validate(p[0], field: "NAME")
        let value = parseValue(p[p.count - 1])
        if p.count == 3 { return try write(a, .set(p[0], path: p[1], value: value, version: try ifVersion(a))) }
        guard case .object(let data) = value else {
            throw UsageError(message: "a whole record is a JSON object, e.g. '{\"stage\":\"ready\"}'; to set one field give a PATH")
        }
        try write(a, .set(p[0], data: data, version: try ifVersion(a)))
    }

    static func del(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 1 || p.count == 2 else { throw UsageError(message: "del needs NAME [PATH]") }
        try Names.validate(p[0], field: "NAME")
        try write(a, .delete(p[0], path: p.count == 2 ? p[1] : nil, version: try ifVersion(a)))
    }

    /// `--if-version N`: refuse unless the record is at version N.
    static func ifVersion(_ a: Arguments) throws(UsageError) -> Int64? {
        guard let text = a.string("if-version") else { return nil }
        guard let version = Int64(text), version >= 0 else {
            throw UsageError(message: "--if-version must be a version number (0: must not exist), not '\(text)'")
        }
        return version
    }

    private static func write(_ a: Arguments, _ operation: WriteOperation) throws {
        let reply = try BlockingTallyClient.write(HubAccess(a), operation, idem: a.string("idem"))
        if a.flag("json") { return output(.object(reply)) }
        let name = reply["name"]?.stringValue ?? reply["list"]?.stringValue ?? ""
        print("\(name) version \(reply["version"].map { "\($0)" } ?? "?") (seq \(reply["seq"].map { "\($0)" } ?? "?"))")
    }

    static func watch(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 1 else { throw UsageError(message: "watch needs one NAME, or a PREFIX ending in '/'") }
        let target = p[0]
        var subscribe: JSONObject = ["op": "subscribe"]
        if target.hasSuffix("/") || target.isEmpty {
            try Names.validatePrefix(target, field: "PREFIX")
            guard a.string("path") == nil else { throw UsageError(message: "--path goes with a record name, not a prefix") }
            subscribe["prefix"] = .string(target)
        } else {
            try Names.validate(target, field: "NAME")
            subscribe["name"] = .string(target)
            if let path = a.string("path") { subscribe["path"] = .string(path) }
        }
        var since: Int64?
        if let text = a.string("since") {
            guard let value = Int64(text), value >= 0 else { throw UsageError(message: "--since must be a sequence number") }
            since = value
        }
        let json = a.flag("json")
        var follower = BlockingFollower(access: try HubAccess(a), subscribe: subscribe, since: since)
        try follower.run { event in
            switch event {
            case .reconnected(let url):
                fputs("tally: reconnected to \(url)\n", stderr)
            case .resnapshot(let since):
                fputs("tally: the hub's change log no longer reaches back to seq \(since); showing the current state instead\n", stderr)
            case .snapshot(let reply):
                if !json {
                    BlockingFollower.snapshotLines(reply).forEach { print($0) }
                    fflush(stdout)
                } else if reply["resnapshot"] == .bool(true) {
                    BlockingFollower.snapshotPushes(reply).forEach { output(.object($0)) }
                }
            case .change(let change):
                json ? output(.object(change)) : output(line: BlockingFollower.line(change))
            case .lost(let error):
                fputs("tally: \(Failure.message(error)); reconnecting…\n", stderr)
            }
            return true
        }
    }

    static func list(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count >= 2, ["show", "add", "remove"].contains(p[0]) else {
            throw UsageError(message: "list needs show|add|remove LIST [ENTRY]")
        }
        try Names.validate(p[1], field: "LIST")
        var at: Int?
        if let text = a.string("at") {
            guard let value = Int(text), value >= 0 else { throw UsageError(message: "--at must be an index from 0") }
            at = value
        }
        if p[0] == "show" {
            guard p.count == 2 else { throw UsageError(message: "list show takes only the LIST") }
        } else {
            guard p.count == 3 else { throw UsageError(message: "list \(p[0]) needs LIST ENTRY") }
            try Names.validate(p[2], field: "ENTRY")
        }
        let reply: JSONObject
        switch p[0] {
        case "show":
            let client = try BlockingTallyClient(access: HubAccess(a))
            defer { client.close() }
            var whole = try client.wholeList(p[1])
            (whole["id"], whole["ok"]) = (nil, nil)
            if a.flag("json") { return output(.object(whole)) }
            for entry in whole["entries"]?.arrayValue ?? [] { print(entry.stringValue ?? entry.serializedString) }
            return
        case "add": reply = try BlockingTallyClient.write(HubAccess(a), .addEntry(p[1], entry: p[2], at: at))
        default: reply = try BlockingTallyClient.write(HubAccess(a), .removeEntry(p[1], entry: p[2], at: at))
        }
        if a.flag("json") { return output(.object(reply)) }
        print("\(p[1]) version \(reply["version"].map { "\($0)" } ?? "?") (seq \(reply["seq"].map { "\($0)" } ?? "?"))")
    }

    static func emit(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 2 else { throw UsageError(message: "emit needs TOPIC JSON") }
        try Names.validate(p[0], field: "TOPIC")
        let reply = try BlockingTallyClient.ask(HubAccess(a), ["op": "publish", "topic": .string(p[0]), "data": parseValue(p[1])])
        if a.flag("json") { return output(.object(reply)) }
        print("delivered to \(reply["delivered"].map { "\($0)" } ?? "0") subscriber(s)")
    }

    static func on(_ a: Arguments) throws {
        let p = a.positionals
        guard p.count == 1 else { throw UsageError(message: "on needs one TOPIC") }
        try Names.validate(p[0], field: "TOPIC")
        let client = try BlockingTallyClient(access: HubAccess(a))
        _ = try client.request(["op": "subscribe", "topic": .string(p[0])])
        while true {
            guard let event = try client.nextPush(timeoutMillis: 60_000) else { continue }
            output(a.flag("json") ? .object(event) : event["data"] ?? .null)
        }
    }

    // MARK: Helpers

    /// JSON if it parses, else the text as a string ("a bare word").
    static func parseValue(_ text: String) -> JSONValue {
        (try? JSONValue.parse(text)) ?? .string(text)
    }

    static func output(_ value: JSONValue, pretty: Bool = false) {
        output(line: pretty ? value.prettyString : value.serializedString)
    }

    /// A line on standard output, flushed: a pipe sees it at once.
    static func output(line: String) {
        print(line)
        fflush(stdout)
    }
}

extension ProtocolError {
    /// Names a bad CLI argument as a usage error.
    var usage: UsageError { UsageError(message: message) }
}
