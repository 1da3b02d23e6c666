@preconcurrency import Glibc
import TallyClient

/// `tally get|set|del|watch|list|emit|on`: the hub's operations from the shell.
enum ClientCommands {
    /// What every client command takes besides `HubAccess.options`.
    static let options = OptionTable(column: 17, [
        Option("json", nil, "machine-readable output (one JSON object per line)"),
        // Described in each command's usage line and help.
        Option("path", "P"), Option("since", "SEQ"), Option("if-version", "N"), Option("idem", "KEY"), Option("at", "I"),
    ])

    static let commonOptions = "Common options:\n\(HubAccess.options.help)\n\(options.help)"

    static let helps: [String: String] = [
        "get": "Usage: tally get NAME [--path P] [--json]\n\nPrints the record's data (or the value at --path). With --json: {\"name\",\"version\",\"seq\",\"data\"}.",
        "set": "Usage: tally set NAME [PATH] VALUE [--if-version N] [--idem KEY] [--json]\n\nSets the whole record (VALUE is a JSON object) or the value at PATH (dot and\nbracket syntax: items[2].qty). VALUE is JSON; a bare word is taken as a string.\n  --if-version N   refuse unless the record is at version N (0: must not exist)\n  --idem KEY       idempotency key: a retry with the same key applies once",
        "del": "Usage: tally del NAME [PATH] [--if-version N] [--idem KEY] [--json]\n\nDeletes the record, or the value at PATH.",
        "watch": "Usage: tally watch NAME|PREFIX/ [--path P] [--since SEQ] [--json]\n\nPrints each change to a record (or to every record under a prefix ending in\n'/') until interrupted; reconnects and resumes after a lost connection.\n  --path P     only changes under this path of the record\n  --since SEQ  first replay the changes after SEQ",
        "list": "Usage: tally list show|add|remove LIST [ENTRY] [--at I] [--json]\n\nShows a list's entries, adds an entry (at index I, default the end), or\nremoves an entry (every occurrence, or the one at --at).",
        "emit": "Usage: tally emit TOPIC JSON\n\nPublishes an event (not stored) to the topic's subscribers.",
        "on": "Usage: tally on TOPIC [--json]\n\nPrints each event published to TOPIC until interrupted.",
    ]

    static func run(_ command: String, _ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: command, options: options, HubAccess.options)
        if a.flag("help") {
            print(helps[command]! + "\n\n" + commonOptions)
            return 0
        }
        return try perform(command, a) { context in
            switch command {
            case "get": try get(context)
            case "set": try set(context)
            case "del": try del(context)
            case "watch": try watch(context)
            case "list": try list(context)
            case "emit": try emit(context)
            case "on": try on(context)
            default: throw UsageError(message: "unknown command '\(command)'")
            }
        }
    }

    /// Runs a client command's body with a connection context, mapping its
    /// failures to messages and exit statuses: usage mistakes and refused
    /// arguments 2, everything else (unreachable hub, refusals) 1.
    static func perform(_ command: String, _ a: Arguments, _ body: (Context) throws -> Void) throws(UsageError) -> Int32 {
        do {
            try body(Context(arguments: a))
            return 0
        } catch let error as UsageError {
            throw error
        } catch {
            return Failure.report(error, command: command)
        }
    }

    struct Context {
        let arguments: Arguments
        var json: Bool { arguments.flag("json") }
        func connect() throws(HubError) -> BlockingTallyClient { try BlockingTallyClient(access: HubAccess(arguments)) }

        /// One request on a fresh connection: the reply without `id` and `ok`.
        func ask(_ message: JSONObject) throws(HubError) -> JSONObject {
            let client = try connect()
            defer { client.close() }
            var reply = try client.request(message)
            reply["id"] = nil
            reply["ok"] = nil
            return reply
        }
    }

    // MARK: Commands

    static func get(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 1 else { throw UsageError(message: "get needs exactly one record name") }
        try Names.validate(p[0], field: "NAME")
        var message: JSONObject = ["op": "get", "name": .string(p[0])]
        if let path = c.arguments.string("path") { message["path"] = .string(path) }
        let reply = try c.ask(message)
        if c.json {
            output(.object(reply))
        } else {
            output(reply["path"] != nil ? reply["value"] ?? .null : reply["data"] ?? .null, pretty: true)
        }
    }

    static func set(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 2 || p.count == 3 else {
            throw UsageError(message: "set needs NAME [PATH] VALUE, e.g. tally set orders/42 stage ready")
        }
        try Names.validate(p[0], field: "NAME")
        var message: JSONObject = ["op": "set", "name": .string(p[0])]
        let value = parseValue(p[p.count - 1])
        if p.count == 3 {
            message["path"] = .string(p[1])
            message["value"] = value
        } else {
            guard case .object = value else {
                throw UsageError(message: "a whole record is a JSON object, e.g. '{\"stage\":\"ready\"}'; to set one field give a PATH")
            }
            message["data"] = value
        }
        try writeOptions(c, into: &message)
        try write(c, message)
    }

    static func del(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 1 || p.count == 2 else { throw UsageError(message: "del needs NAME [PATH]") }
        try Names.validate(p[0], field: "NAME")
        var message: JSONObject = ["op": "delete", "name": .string(p[0])]
        if p.count == 2 { message["path"] = .string(p[1]) }
        try writeOptions(c, into: &message)
        try write(c, message)
    }

    private static func writeOptions(_ c: Context, into message: inout JSONObject) throws(UsageError) {
        if let text = c.arguments.string("if-version") {
            guard let version = Int64(text), version >= 0 else {
                throw UsageError(message: "--if-version must be a version number (0: must not exist), not '\(text)'")
            }
            message["version"] = .number(JSONNumber(version))
        }
        if let key = c.arguments.string("idem") { message["idem"] = .string(key) }
    }

    private static func write(_ c: Context, _ message: JSONObject) throws {
        let reply = try c.ask(message)
        if c.json {
            output(.object(reply))
        } else {
            let name = reply["name"]?.stringValue ?? reply["list"]?.stringValue ?? ""
            let version = reply["version"].map { "\($0)" } ?? "?"
            let seq = reply["seq"].map { "\($0)" } ?? "?"
            print("\(name) version \(version) (seq \(seq))")
        }
    }

    static func watch(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 1 else { throw UsageError(message: "watch needs one NAME, or a PREFIX ending in '/'") }
        let target = p[0]
        var subscribe: JSONObject = ["op": "subscribe"]
        if target.hasSuffix("/") || target.isEmpty {
            try Names.validatePrefix(target, field: "PREFIX")
            guard c.arguments.string("path") == nil else { throw UsageError(message: "--path goes with a record name, not a prefix") }
            subscribe["prefix"] = .string(target)
        } else {
            try Names.validate(target, field: "NAME")
            subscribe["name"] = .string(target)
            if let path = c.arguments.string("path") { subscribe["path"] = .string(path) }
        }
        var since: Int64?
        if let text = c.arguments.string("since") {
            guard let value = Int64(text), value >= 0 else { throw UsageError(message: "--since must be a sequence number") }
            since = value
        }
        var follower = BlockingFollower(access: HubAccess(c.arguments), subscribe: subscribe, since: since)
        try follower.run { event in
            switch event {
            case .reconnected(let url):
                fputs("tally: reconnected to \(url)\n", stderr)
            case .resnapshot(let since):
                fputs("tally: the hub's change log no longer reaches back to seq \(since); showing the current state instead\n", stderr)
            case .snapshot(let reply):
                if !c.json {
                    showSnapshot(reply)
                } else if reply["resnapshot"] == .bool(true) {
                    showSnapshotJSON(reply)
                }
            case .change(let change):
                show(change: change, c)
            case .lost(let error):
                fputs("tally: \(Failure.message(error)); reconnecting…\n", stderr)
            }
            return true
        }
    }

    private static func showSnapshot(_ reply: JSONObject) {
        if case .object(let record)? = reply["record"] {
            print("current \(record["name"]?.stringValue ?? "") v\(record["version"].map { "\($0)" } ?? "?"): \((record["data"] ?? record["value"] ?? .null).serializedString)")
        } else if case .array(let records)? = reply["records"] {
            for case .object(let record) in records {
                print("current \(record["name"]?.stringValue ?? "") v\(record["version"].map { "\($0)" } ?? "?"): \((record["data"] ?? .null).serializedString)")
            }
        }
        fflush(stdout)
    }

    /// After a resnapshot, each current record as one line shaped like a
    /// push (`"op":"snapshot"`), so a --json consumer can resynchronise.
    private static func showSnapshotJSON(_ reply: JSONObject) {
        var records: [JSONValue] = reply["records"]?.arrayValue ?? []
        if let record = reply["record"], record != .null { records.append(record) }
        if let list = reply["list"], list != .null { records.append(list) }
        for case .object(var record) in records {
            record["op"] = "snapshot"
            output(.object(record))
        }
    }

    private static func show(change: JSONObject, _ c: Context) {
        if c.json { return output(.object(change)) }
        let name = change["name"]?.stringValue ?? change["list"]?.stringValue ?? change["topic"]?.stringValue ?? ""
        let kind = change["kind"]?.stringValue ?? change["op"]?.stringValue ?? ""
        var line = "\(change["seq"].map { "\($0)" } ?? "-") \(name) v\(change["version"].map { "\($0)" } ?? "-") \(kind)"
        if let path = change["path"]?.stringValue { line += " \(path)" }
        if let value = change["data"] ?? change["value"] ?? change["entries"] ?? change["entry"] { line += " \(value.serializedString)" }
        print(line)
        fflush(stdout)
    }

    static func list(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count >= 2, ["show", "add", "remove"].contains(p[0]) else {
            throw UsageError(message: "list needs show|add|remove LIST [ENTRY]")
        }
        try Names.validate(p[1], field: "LIST")
        var at: Int?
        if let text = c.arguments.string("at") {
            guard let value = Int(text), value >= 0 else { throw UsageError(message: "--at must be an index from 0") }
            at = value
        }
        if p[0] == "show" {
            guard p.count == 2 else { throw UsageError(message: "list show takes only the LIST") }
        } else {
            guard p.count == 3 else { throw UsageError(message: "list \(p[0]) needs LIST ENTRY") }
            try Names.validate(p[2], field: "ENTRY")
        }
        switch p[0] {
        case "show":
            let client = try c.connect()
            defer { client.close() }
            var reply = try client.wholeList(p[1])
            (reply["id"], reply["ok"]) = (nil, nil)
            if c.json { return output(.object(reply)) }
            for entry in reply["entries"]?.arrayValue ?? [] { print(entry.stringValue ?? entry.serializedString) }
        default:
            var message: JSONObject = ["op": p[0] == "add" ? "addEntry" : "removeEntry",
                                       "list": .string(p[1]), "entry": .string(p[2])]
            if let at { message["at"] = .number(JSONNumber(at)) }
            let reply = try c.ask(message)
            if c.json { return output(.object(reply)) }
            print("\(p[1]) version \(reply["version"].map { "\($0)" } ?? "?") (seq \(reply["seq"].map { "\($0)" } ?? "?"))")
        }
    }

    static func emit(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 2 else { throw UsageError(message: "emit needs TOPIC JSON") }
        try Names.validate(p[0], field: "TOPIC")
        let reply = try c.ask(["op": "publish", "topic": .string(p[0]), "data": parseValue(p[1])])
        if c.json { return output(.object(reply)) }
        print("delivered to \(reply["delivered"].map { "\($0)" } ?? "0") subscriber(s)")
    }

    static func on(_ c: Context) throws -> Void {
        let p = c.arguments.positionals
        guard p.count == 1 else { throw UsageError(message: "on needs one TOPIC") }
        try Names.validate(p[0], field: "TOPIC")
        let client = try c.connect()
        _ = try client.request(["op": "subscribe", "topic": .string(p[0])])
        while true {
            guard let event = try client.nextPush(timeoutMillis: 60_000) else { continue }
            if c.json { output(.object(event)) } else { output(event["data"] ?? .null) }
        }
    }

    // MARK: Helpers

    /// JSON if it parses, else the text as a string ("a bare word").
    static func parseValue(_ text: String) -> JSONValue {
        (try? JSONValue.parse(text)) ?? .string(text)
    }

    static func output(_ value: JSONValue, pretty: Bool = false) {
        print(pretty ? value.prettyString : value.serializedString)
        fflush(stdout)
    }
}

extension ProtocolError {
    /// Names a bad CLI argument as a usage error.
    var usage: UsageError { UsageError(message: message) }
}
