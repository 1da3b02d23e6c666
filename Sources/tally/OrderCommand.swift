@preconcurrency import Glibc
import TallyClient
import TallyMirror
import TallyProtocol
import TallyCommandLine

/// `tally order new|advance|cancel|ls`: stock orders, whose stages the hub
/// enforces (received → in-progress → ready → delivered, or cancelled).
enum OrderCommand {
    static let help = """
    Usage: tally order new ITEM --qty N [--kind issue|receive] [--check-stock] [--idem KEY]
           tally order advance ORDER [--to STAGE] [--reason TEXT]
           tally order cancel ORDER [--reason TEXT]
           tally order ls [--stage STAGE]… [--all]

    new      creates an order for ITEM (items/… or its id, which must exist)
             and prints the order's name (orders/…) as the last line;
             --check-stock refuses an issue order for more than the
             item's stock (insufficient_stock) instead of failing later,
             at delivery
    advance  moves ORDER (orders/… or its id) to its next stage, or to --to
    cancel   moves ORDER to cancelled
    ls       one line per open order: name, stage, qty, kind, item (--json:
             one JSON object per order); --stage STAGE (repeatable) lists
             those stages instead, --all every order ever made (paged)
    """

    /// Described in the usage lines above.
    static let options = OptionTable(column: 0, [
        Option("qty", "N"), Option("kind", "K"), Option("check-stock"), Option("idem", "KEY"), Option("to", "STAGE"),
        Option("reason", "TEXT"), Option("stage", "STAGE"), Option("all"),
    ])

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "order", options: options, ClientCommands.options.only(["json"]),
                              HubAccess.options)
        if a.flag("help") || a.positionals.isEmpty {
            print(help + "\n\n" + ClientCommands.commonOptions)
            return a.flag("help") ? 0 : 2
        }
        let rest = Array(a.positionals.dropFirst())
        switch a.positionals[0] {
        case "new": try create(a, rest)
        case "advance": try advance(a, rest, to: a.string("to"))
        case "cancel": try advance(a, rest, to: "cancelled")
        case "ls": try list(a, rest)
        case let verb: throw UsageError(message: "unknown order command '\(verb)'; use new, advance, cancel or ls")
        }
        return 0
    }

    static func create(_ a: Arguments, _ p: [String]) throws {
        guard p.count == 1 else { throw UsageError(message: "order new needs one ITEM, e.g. tally order new items/drill-01 --qty 2") }
        let item = OrderRequests.name(p[0], under: "items/")
        try Names.validate(item, field: "ITEM")
        guard let qty = try a.int("qty", in: 1...1_000_000_000) else {
            throw UsageError(message: "order new needs --qty N (a whole number from 1)")
        }
        let kind = a.string("kind") ?? "issue"
        guard kind == "issue" || kind == "receive" else {
            throw UsageError(message: "--kind must be issue or receive, not '\(kind)'")
        }
        let name = OrderRequests.newName()
        let reply = try BlockingTallyClient.write(HubAccess(a), OrderRequests.create(name, item: item, qty: qty, kind: kind,
                                                                                        checkStock: a.flag("check-stock")),
                                                  idem: a.string("idem"))
        if a.flag("json") { return ClientCommands.output(.object(reply)) }
        print("created \(kind) order for \(qty) × \(item) (stage received, seq \(reply["seq"].map { "\($0)" } ?? "?"))")
        print(name)
    }

    static func advance(_ a: Arguments, _ p: [String], to: String?) throws {
        guard p.count == 1 else { throw UsageError(message: "give one ORDER, e.g. orders/7f3c… (or just its id)") }
        let name = OrderRequests.name(p[0], under: "orders/")
        try Names.validate(name, field: "ORDER")
        let reply = try BlockingTallyClient.write(HubAccess(a), .advance(name, to: to, reason: a.string("reason")))
        if a.flag("json") { return ClientCommands.output(.object(reply)) }
        print("\(name): \(reply["from"]?.stringValue ?? "?") → \(reply["to"]?.stringValue ?? "?") (version \(reply["version"].map { "\($0)" } ?? "?"))")
    }

    /// Open orders by default, through a live query (what it reads does not
    /// grow with the orders delivered long ago); `--stage` for other
    /// stages, `--all` pages through the whole prefix.
    static func list(_ a: Arguments, _ p: [String]) throws {
        guard p.isEmpty else { throw UsageError(message: "order ls takes no arguments; filter with --stage or list everything with --all") }
        let stages = a.strings("stage"), all = a.flag("all"), json = a.flag("json")
        guard !(all && !stages.isEmpty) else { throw UsageError(message: "order ls takes --stage or --all, not both") }
        let access = try HubAccess(a)
        // The hub's `orders/` workflow (`GET /v1/workflows`), or the shipped one when the hub cannot say.
        let workflow = all ? nil : (WorkflowCatalog.fetchJSON(access).flatMap(WorkflowCatalog.init(json:)) ?? .shipped)
            .rule(for: "orders/x")
        let open = workflow.map { flow in flow.stages.filter { !flow.terminal.contains($0) } } ?? []
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        var rows: [[String]] = []
        try client.forEachPage(OrderRequests.list(stages: all ? nil : stages.isEmpty ? open : stages,
                                                  stageField: workflow?.stageField ?? "stage")) { records in
            for record in records {
                let data = record["data"]?.objectValue ?? [:]
                if json {
                    var line: JSONObject = ["name": record["name"] ?? .null, "version": record["version"] ?? .null]
                    for (key, value) in data where key != "history" { line[key] = value }
                    ClientCommands.output(.object(line))
                } else {
                    rows.append([record["name"]?.stringValue ?? "?", data["stage"]?.stringValue ?? "?", data["qty"].map { "\($0)" } ?? "?",
                                 data["kind"]?.stringValue ?? "?", data["item"]?.stringValue ?? "?"])
                }
            }
        }
        guard !json else { return }
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
}

extension String {
    /// Pads with spaces to `width` characters.
    func padding(to width: Int) -> String {
        count < width ? self + String(repeating: " ", count: width - count) : self
    }
}
