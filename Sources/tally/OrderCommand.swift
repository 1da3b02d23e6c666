@preconcurrency import Glibc
import TallyClient
import TallyMirror
import TallyProtocol

/// `tally order new|advance|cancel|ls`: stock orders, whose stages the hub
/// enforces (received → in-progress → ready → delivered, or cancelled).
enum OrderCommand {
    static let help = """
    Usage: tally order new ITEM --qty N [--kind issue|receive] [--idem KEY]
           tally order advance ORDER [--to STAGE] [--reason TEXT]
           tally order cancel ORDER [--reason TEXT]
           tally order ls [--stage STAGE]… [--all]

    new      creates an order for ITEM (items/… or its id) and prints the
             order's name (orders/…) as the last line
    advance  moves ORDER (orders/… or its id) to its next stage, or to --to
    cancel   moves ORDER to cancelled
    ls       one line per open order: name, stage, qty, kind, item (--json:
             one JSON object per order); --stage STAGE (repeatable) lists
             those stages instead, --all every order ever made (paged)
    """

    /// Described in the usage lines above.
    static let options = OptionTable(column: 0, [
        Option("qty", "N"), Option("kind", "K"), Option("idem", "KEY"), Option("to", "STAGE"), Option("reason", "TEXT"),
        Option("stage", "STAGE"), Option("all"),
    ])

    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "order", options: options, ClientCommands.options, HubAccess.options)
        if a.flag("help") || a.positionals.isEmpty {
            print(help + "\n\n" + ClientCommands.commonOptions)
            return a.flag("help") ? 0 : 2
        }
        let verb = a.positionals[0]
        let rest = Array(a.positionals.dropFirst())
        switch verb {
        case "new", "advance", "cancel", "ls": break
        default: throw UsageError(message: "unknown order command '\(verb)'; use new, advance, cancel or ls")
        }
        return try ClientCommands.perform("order", a) { c in
            switch verb {
            case "new": try create(c, rest)
            case "advance": try advance(c, rest, to: a.string("to"))
            case "cancel": try advance(c, rest, to: "cancelled")
            default: try list(c, rest)
            }
        }
    }

    static func create(_ c: ClientCommands.Context, _ p: [String]) throws {
        guard p.count == 1 else { throw UsageError(message: "order new needs one ITEM, e.g. tally order new items/drill-01 --qty 2") }
        let item = p[0].hasPrefix("items/") ? p[0] : "items/" + p[0]
        try Names.validate(item, field: "ITEM")
        guard let qty = try c.arguments.int("qty", in: 1...1_000_000_000) else {
            throw UsageError(message: "order new needs --qty N (a whole number from 1)")
        }
        let kind = c.arguments.string("kind") ?? "issue"
        guard kind == "issue" || kind == "receive" else {
            throw UsageError(message: "--kind must be issue or receive, not '\(kind)'")
        }
        let name = "orders/" + randomHex(bytes: 8)
        var message: JSONObject = ["op": "set", "name": .string(name), "version": 0,
                                   "data": ["item": .string(item), "qty": .number(JSONNumber(qty)), "kind": .string(kind)]]
        if let key = c.arguments.string("idem") { message["idem"] = .string(key) }
        let reply = try c.ask(message)
        if c.json {
            ClientCommands.output(.object(reply))
        } else {
            print("created \(kind) order for \(qty) × \(item) (stage received, seq \(reply["seq"].map { "\($0)" } ?? "?"))")
            print(name)
        }
    }

    static func advance(_ c: ClientCommands.Context, _ p: [String], to: String?) throws {
        guard p.count == 1 else { throw UsageError(message: "give one ORDER, e.g. orders/7f3c… (or just its id)") }
        let name = p[0].hasPrefix("orders/") ? p[0] : "orders/" + p[0]
        try Names.validate(name, field: "ORDER")
        var message: JSONObject = ["op": "advance", "name": .string(name)]
        if let to { message["to"] = .string(to) }
        if let reason = c.arguments.string("reason") { message["reason"] = .string(reason) }
        let reply = try c.ask(message)
        if c.json {
            ClientCommands.output(.object(reply))
        } else {
            print("\(name): \(reply["from"]?.stringValue ?? "?") → \(reply["to"]?.stringValue ?? "?") (version \(reply["version"].map { "\($0)" } ?? "?"))")
        }
    }

    /// Open orders by default, through a live query's `get` (what it reads
    /// does not grow with the orders delivered long ago); `--stage` for
    /// other stages, `--all` pages through the whole prefix.
    static func list(_ c: ClientCommands.Context, _ p: [String]) throws {
        guard p.isEmpty else { throw UsageError(message: "order ls takes no arguments; filter with --stage or list everything with --all") }
        let stages = c.arguments.strings("stage")
        let all = c.arguments.flag("all")
        guard !(all && !stages.isEmpty) else { throw UsageError(message: "order ls takes --stage or --all, not both") }
        let workflow = all ? nil : ordersWorkflow(c)
        let wanted = stages.isEmpty ? workflow.map { flow in flow.stages.filter { !flow.terminal.contains($0) } } ?? [] : stages
        let client = try c.connect()
        defer { client.close() }
        var rows: [[String]] = []
        var message: JSONObject = ["op": "get"]
        if all {
            message["prefix"] = "orders/"
        } else {
            let field = workflow?.stageField ?? "stage"
            message["query"] = ["prefix": "orders/", "where": [field: .array(wanted.map(JSONValue.string))]]
        }
        try client.forEachPage(message) { records in
            for record in records {
                let data = record["data"]?.objectValue ?? [:]
                let current = data["stage"]?.stringValue ?? "?"
                if c.json {
                    var line: JSONObject = ["name": record["name"] ?? .null, "version": record["version"] ?? .null]
                    for (key, value) in data where key != "history" { line[key] = value }
                    ClientCommands.output(.object(line))
                } else {
                    rows.append([record["name"]?.stringValue ?? "?", current, data["qty"].map { "\($0)" } ?? "?",
                                 data["kind"]?.stringValue ?? "?", data["item"]?.stringValue ?? "?"])
                }
            }
        }
        guard !c.json else { return }
        if rows.isEmpty {
            fputs(all ? "no orders\n" : stages.isEmpty ? "no open orders (--all lists every order)\n"
                  : "no orders at stage \(stages.joined(separator: ", "))\n", stderr)
            return
        }
        let widths = (0..<5).map { column in rows.map { $0[column].count }.max() ?? 0 }
        for row in rows {
            print(row.enumerated().map { $0.offset == 4 ? $0.element : $0.element.padding(to: widths[$0.offset]) }.joined(separator: "  "))
        }
    }

    /// The hub's `orders/` workflow (`GET /v1/workflows`), or the shipped one
    /// when the hub cannot say.
    static func ordersWorkflow(_ c: ClientCommands.Context) -> WorkflowRule? {
        let catalog = WorkflowCatalog.fetchJSON(HubAccess(c.arguments)).flatMap(WorkflowCatalog.init(json:)) ?? .shipped
        return catalog.rule(for: "orders/x")
    }

    /// Random lowercase hex (the system generator: getrandom).
    static func randomHex(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in
            String(UInt8.random(in: 0...255, using: &generator), radix: 16).padding(to: 2, with: "0", leading: true)
        }.joined()
    }
}

extension String {
    /// Pads with `pad` to `width` characters (at the end unless `leading`).
    func padding(to width: Int, with pad: Character = " ", leading: Bool = false) -> String {
        guard count < width else { return self }
        let fill = String(repeating: pad, count: width - count)
        return leading ? fill + self : self + fill
    }
}
