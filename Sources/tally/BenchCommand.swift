@preconcurrency import Glibc
import TallyBench
import TallyNet
import TallyTLS
import TallyCommandLine

/// `tally bench …`: load generators that print a table.
enum BenchCommand {
    /// Each benchmark: its name, what it does (under the name, from column
    /// 14), its options and how they make its run.
    static let benchmarks: [(name: String, about: String, options: OptionTable,
                             parse: @Sendable (Arguments) throws(UsageError) -> BenchRun)] = [
        ("echo", "round trips against a WebSocket echo endpoint: latency and messages/s", OptionTable(column: 24, [
            Option("url", "URL", "(default ws://127.0.0.1:8080/echo)"),
            Option("connections", "C", "concurrent connections (default 10)"),
            Option("messages", "N", "round trips per connection (default 10000)"),
            Option("size", "BYTES", "message size (default 64)"),
            Option("threads", "N", "client event-loop threads (default 1)"),
            Option("no-compression", nil, "do not offer permessage-deflate"),
            Option("insecure", nil, "for wss:// URLs: accept any certificate"),
        ]), echo),
        ("connections", """
        opens many idle WebSocket connections; with --server-pid, the
                      server's resident memory per connection
        """, OptionTable(column: 24, [
            Option("url", "URL", "(default ws://127.0.0.1:8080/echo)"),
            Option("count", "N", "connections to open (default 10000)"),
            Option("server-pid", "PID", "process whose /proc/PID/status VmRSS is read"),
            Option("concurrency", "K", "handshakes in flight at once (default 200)"),
            Option("threads", "N", "client event-loop threads (default 2)"),
            Option("subprotocol", "P", "offer this subprotocol (e.g. mqtt for Mosquitto)"),
            Option("compression", nil, "offer permessage-deflate (idle connections should", "still hold no zlib memory)"),
            Option("insecure", nil, "for wss:// URLs: accept any certificate"),
        ]), connections),
        ("fanout", """
        S subscribers, one publisher sending U updates/s for D seconds;
                      latency (send → receipt, CLOCK_MONOTONIC) and the broker's CPU
                      per delivered message (its threads' run time from
                      /proc/PID/task/*/schedstat). Each broker runs as a child
                      process: Tally (this binary, `serve`) and Mosquitto as the
                      baseline. The brokers take turns in rounds; each row pools
                      its broker's rounds.
        """, OptionTable(column: 24, [
            Option("subscribers", "LIST", "subscriber counts (default 100,1000)"),
            Option("rate", "U", "updates per second (default 100)"),
            Option("seconds", "D", "publishing time per broker, shared among the rounds", "(default 10)"),
            Option("rounds", "K", "turns per broker, each D/K seconds with a fresh", "broker process (default 3)"),
            Option("mode", "LIST", "events, records and/or record-per-sub (default events)",
                   "  events: Tally publish to a topic; MQTT PUBLISH", "  records: Tally set of one record all follow;",
                   "    MQTT retained PUBLISH", "  record-per-sub: each subscriber its own record",
                   "    (topic), the publisher rotates over them"),
            Option("broker", "LIST", "tally and/or mosquitto (default tally,mosquitto)"),
            Option("drain", "SECONDS", "wait for late messages after the last update; later", "ones count as lost (default 2)"),
            Option("threads", "N", "subscriber event-loop threads (default 1)"),
            Option("compression", nil, "offer permessage-deflate (pushes then compressed per connection)"),
            Option("durability", "MODE", "the Tally hub's --durability: full (default), normal or off"),
        ]), fanout),
        ("cross-hub", """
        one record's updates to its subscribers on one SQLite hub, on
                      the writing hub on PostgreSQL, and on a second hub on the
                      same PostgreSQL store: latency and hub CPU per message
        """, OptionTable(column: 24, [
            Option("store", "URL", "the PostgreSQL database the hubs share (required)"),
            Option("subscribers", "N", "subscribers (default 100)"),
            Option("rate", "N", "updates per second (default 100)"),
            Option("seconds", "D", "publishing time per path, shared by the rounds", "(default 10)"),
            Option("rounds", "N", "turns of the three paths, fresh hubs each (default 3)"),
            Option("threads", "N", "subscriber event-loop threads (default 1)"),
        ]), crossHub),
        ("writes", """
        W writer connections in a closed loop of `set` + acknowledgement
                      against a Tally hub child with a fresh store: acknowledged
                      writes/s, acknowledgement latency, hub CPU per write
        """, OptionTable(column: 24, [
            Option("writers", "LIST", "writer counts (default 1,10,100)"),
            Option("seconds", "D", "measuring time per count (default 10)"),
            Option("durability", "MODE", "the hub's --durability: full (default), normal or off"),
            Option("records", "N", "write random records among N shared by all writers",
                   "(default: each writer cycles over its own 1000)"),
            Option("threads", "N", "client event-loop threads (default 1)"),
            Option("store", "URL", "the hubs keep their data in this PostgreSQL database",
                   "(postgres://USER@HOST:PORT/DB) instead of SQLite"),
            Option("hubs", "N", "hub children on --store, the writers spread over them",
                   "(default 1)"),
        ]), writes),
        ("startup", """
        fills a store with N records, stops the hub, then times
                      `tally serve` from exec to "listening" and to the first `get`
        """, OptionTable(column: 24, [
            Option("records", "N", "records (default 1000000)"),
            Option("orders", nil, "fill with N finished orders instead (created and",
                   "advanced to delivered, 1000 per write, through", "1 connection unless --connections); each start",
                   "also times its first order creation, the first", "write that needs the workflow's stats"),
            Option("starts", "K", "timed starts; the median is reported (default 3)"),
            Option("connections", "C", "filling connections (default 4)"),
            Option("fill-durability", "M", "--durability while filling (default full)"),
        ]), startup),
        ("soak", """
        steady mixed load against a Tally hub child with a fresh store
                      for a long time: writers run records through their stages and
                      orders to delivered, subscribers follow records and prefixes,
                      reconnecting clients leave and resume by seq. Prints the hub's
                      resident memory over time, then a summary (growth in the second
                      half); checks every push (in seq order, no repeats, no gaps);
                      exit status 1 on any delivery or write error
        """, OptionTable(column: 24, [
            Option("seconds", "D", "load time (default 600)"),
            Option("writers", "W", "writer connections, half records, half orders (default 20)"),
            Option("rate", "R", "writes per second, all writers together (default 840)"),
            Option("subscribers", "S", "record and prefix subscribers (default 210)"),
            Option("reconnecting", "C", "clients that reconnect and resume (default 30)"),
            Option("reconnect-every", "LO-HI", "seconds a reconnecting client stays (default 5-10)"),
            Option("interval", "SECONDS", "time between table rows (default a twentieth of the run)"),
            Option("durability", "MODE", "the hub's --durability: full (default), normal or off"),
            Option("threads", "N", "client event-loop threads (default 1)"),
            .pair(Option("url", "URL"), Option("hub-pid", "PID"), "soak a hub started elsewhere (under heaptrack,",
                  "say) instead of a fresh child; RSS is read from PID"),
        ]), soak),
        ("history", """
        whether writes slow down as history grows: a Tally hub child on a
                      fresh store is filled with finished orders (created and advanced
                      to delivered in atomic writes of 1000) to each size in turn; at
                      each size, order creations/s, advances/s and addEntry/s on a big
                      list are measured from each connection count. Prints rate per
                      size, measure and connections, then each rate at the largest
                      size ÷ at the smallest (target ≥ 0.8×); on stderr, the hub's CPU
                      time per operation (steadier on a shared machine). Exit status 1 when a
                      row could not be measured (a refusal is shown as a failed row)
        """, OptionTable(column: 24, [
            Option("sizes", "LIST", "finished orders (default 1000,100000,1000000)"),
            Option("list-entries", "N", "entries in the list addEntry appends to, filled",
                   "once before the first size (default 1000000)"),
            Option("list", "NAME", "that list (default bench/history-list)"),
            Option("seconds", "D", "measuring time per row (default 5)"),
            Option("connections", "LIST", "connection counts (default 1,100)"),
            Option("window", "N", "requests in flight in total, shared by the", "connections, at least 1 each (default 100)"),
            Option("fill-connections", "C", "connections filling the hub (default 1)"),
            Option("fill-batch", "N", "orders (or list entries) per atomic write while", "filling, 1 to 1000 (default 1000)"),
            Option("durability", "MODE", "the hub's --durability: full (default), normal or off"),
            Option("threads", "N", "client event-loop threads (default 1)"),
            Option("json", nil, "print the result as JSON instead of tables"),
        ]), history),
        ("analysis", """
        photo analysis in this process on 12 MP photos drawn here (a label
                      with an EAN-13, a Data Matrix and printed text): per photo,
                      decode, ZBar, libdmtx, Tesseract, their total and
                      PhotoAnalysis.analyze end to end, p50/p95 over the photos;
                      thumbnail making time per width and output format
        """, OptionTable(column: 24, [
            Option("photos", "N", "photos per format (default 10)"),
            Option("formats", "LIST", "jpeg, webp and/or png (default jpeg,webp,png)"),
            Option("size", "WxH", "photo size (default 4000x3000, 12 MP)"),
        ]), analysis),
        ("analysis-fanout", """
        the fan-out load (events, S subscribers, U updates/s) on one
                      Tally hub child, idle and while a background client keeps it
                      analysing 12 MP photos (blob uploads and intake records moved
                      to media-uploaded, one after another), in alternating rounds;
                      idle p99, analysing p99 and their ratio (target ≤ 1.2×)
        """, OptionTable(column: 24, [
            Option("subscribers", "S", "subscribers (default 100)"),
            Option("rate", "U", "updates per second (default 100)"),
            Option("seconds", "D", "publishing time per phase, shared among the rounds", "(default 20)"),
            Option("rounds", "K", "idle/analysing pairs on the one hub (default 2)"),
            Option("inflight", "N", "records waiting for analysis at once (default 2)"),
            Option("photos", "N", "distinct photos drawn (default 4)"),
            Option("wait", "SECONDS", "how long a record may wait for its analysis", "(default 30)"),
            Option("config", "FILE", "the hub's --config (analysis settings)"),
            Option("threads", "N", "subscriber event-loop threads (default 1)"),
            Option("durability", "MODE", "the hub's --durability: full (default), normal or off"),
        ]), analysisFanout),
    ]

    static let help = "Usage: " + benchmarks.map { "tally bench \($0.name) [options]" }.joined(separator: "\n       ") + "\n\n"
        + benchmarks.map(section).joined(separator: "\n\n")

    /// A benchmark's help: its name, what it does from column 14 (on the
    /// next line for a name too long to leave a gap), its options.
    static func section(_ bench: (name: String, about: String, options: OptionTable,
                                  parse: @Sendable (Arguments) throws(UsageError) -> BenchRun)) -> String {
        let head = bench.name.count < 13 ? bench.name.padding(to: 14) : bench.name + "\n" + String(repeating: " ", count: 14)
        return head + bench.about + "\n" + bench.options.help
    }

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        guard let which = args.first, !which.hasPrefix("-"), which != "help" else {
            guard args.first != nil else { print(help); return 0 }
            // `tally bench --help` takes the options it lists: every benchmark's.
            let a = try Arguments(args.first == "help" ? args.dropFirst() : args, command: "bench",
                                  options: OptionTable(column: 24, benchmarks.flatMap(\.options.options)))
            guard a.flag("help") || args.first == "help" else {
                throw UsageError(message: "bench needs a benchmark: echo, connections, fanout, cross-hub, writes, startup, soak, history, analysis or analysis-fanout")
            }
            print(help)
            return 0
        }
        guard let bench = benchmarks.first(where: { $0.name == which }) else {
            throw UsageError(message: "unknown benchmark '\(which)': use echo, connections, fanout, cross-hub, writes, startup, soak, history, analysis or analysis-fanout")
        }
        let a = try Arguments(args.dropFirst(), command: "bench \(which)", options: bench.options)
        if a.flag("help") {
            // This benchmark's section: the options this parser takes.
            print("Usage: tally bench \(bench.name) [options]\n\n" + section(bench))
            return 0
        }
        try a.noPositionals("bench \(which)")
        let run = try bench.parse(a)
        let report: BenchRun.Report
        do {
            report = try run.run(log: progress, opened: { fputs("\r  opened \($0)", stderr) }) { row, error in
                Failure.warn(CommandFailure.benchmark(row, error))
            }
        } catch {
            throw CommandFailure.benchmark(error.label, error.error)
        }
        if case .connections = run { fputs("\n", stderr) }
        if let json = report.json {
            print(json)
        } else {
            print(report.tables.map(renderTable).joined(separator: "\n"), terminator: "")
        }
        report.notes.forEach(progress)
        return report.failed ? 1 : 0
    }

    private static func echo(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = EchoBenchmark(url: a.string("url") ?? "ws://127.0.0.1:8080/echo")
        bench.connections = try a.int("connections", in: 1...10_000) ?? 10
        bench.messagesPerConnection = try a.int("messages", in: 1...100_000_000) ?? 10_000
        bench.size = try a.int("size", in: 0...(64 << 20)) ?? 64
        bench.options.deflate.enabled = !a.flag("no-compression")
        if a.flag("insecure") { bench.tls = try? TLSContext.client(verifyPeer: false) }
        return .echo(bench, threads: try a.int("threads", in: 1...64) ?? 1)
    }

    private static func connections(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = ConnectionsBenchmark(url: a.string("url") ?? "ws://127.0.0.1:8080/echo")
        bench.count = try a.int("count", in: 1...1_000_000) ?? 10_000
        bench.concurrency = try a.int("concurrency", in: 1...10_000) ?? 200
        bench.serverPID = try a.int("server-pid", in: 1...Int(Int32.max)).map { Int32($0) }
        bench.options.deflate.enabled = a.flag("compression")
        if a.flag("insecure") { bench.tls = try? TLSContext.client(verifyPeer: false) }
        if let subprotocol = a.string("subprotocol") { bench.subprotocols = [subprotocol] }
        return .connections(bench, threads: try a.int("threads", in: 1...64) ?? 2)
    }

    private static func progress(_ line: String) { fputs("  \(line)\n", stderr) }

    /// A comma-separated list of whole numbers in `range`.
    private static func intList(_ a: Arguments, _ name: String, default value: [Int],
                                in range: ClosedRange<Int>) throws(UsageError) -> [Int] {
        guard let text = a.string(name) else { return value }
        var list: [Int] = []
        for part in text.split(separator: ",") {
            guard let n = Int(part), range.contains(n) else {
                throw UsageError(message: "--\(name) takes numbers from \(range.lowerBound) to \(range.upperBound) separated by commas, not '\(text)'")
            }
            list.append(n)
        }
        guard !list.isEmpty else { throw UsageError(message: "--\(name) needs at least one number") }
        return list
    }

    /// `--durability`: full (the default), normal or off.
    private static func durabilityMode(_ a: Arguments) throws(UsageError) -> String {
        let mode = a.string("durability") ?? "full"
        guard ["full", "normal", "off"].contains(mode) else {
            throw UsageError(message: "--durability must be full, normal or off, not '\(mode)'")
        }
        return mode
    }

    private static func seconds(_ a: Arguments, _ name: String, default value: Double) throws(UsageError) -> Double {
        guard let text = a.string(name) else { return value }
        guard let s = Double(text), s >= 0, s <= 86_400 else {
            throw UsageError(message: "--\(name) must be a number of seconds, not '\(text)'")
        }
        return s
    }

    /// Each comma-separated name of `--NAME` as a `T`, or a usage error
    /// saying which names it takes.
    private static func names<T: RawRepresentable<String>>(_ a: Arguments, _ name: String, default value: String,
                                                          takes: String) throws(UsageError) -> [T] {
        var list: [T] = []
        for part in (a.string(name) ?? value).split(separator: ",") {
            guard let item = T(rawValue: String(part)) else {
                throw UsageError(message: "--\(name) takes \(takes), not '\(part)'")
            }
            list.append(item)
        }
        return list
    }

    private static func fanout(_ a: Arguments) throws(UsageError) -> BenchRun {
        let counts = try intList(a, "subscribers", default: [100, 1000], in: 1...20_000)
        var template = FanoutBenchmark(broker: .tally, mode: .events)
        template.rate = try a.int("rate", in: 1...100_000) ?? 100
        let duration = try seconds(a, "seconds", default: 10)
        template.drainSeconds = try seconds(a, "drain", default: 2)
        template.threads = try a.int("threads", in: 1...64) ?? 1
        let rounds = try a.int("rounds", in: 1...100) ?? 3
        template.durability = try durabilityMode(a)
        let modes: [FanoutBenchmark.Mode] = try names(a, "mode", default: "events", takes: "events, records or record-per-sub")
        let brokers: [BrokerProcess.Kind] = try names(a, "broker", default: "tally,mosquitto", takes: "tally and/or mosquitto")
        template.compression = a.flag("compression")
        var bench = FanoutRounds(template: template)
        (bench.modes, bench.subscriberCounts, bench.brokers) = (modes, counts, brokers)
        (bench.rounds, bench.seconds) = (rounds, duration)
        return .fanout(bench)
    }

    private static func crossHub(_ a: Arguments) throws(UsageError) -> BenchRun {
        guard let store = a.string("store") else {
            throw UsageError(message: "bench cross-hub needs --store postgres://USER@HOST:PORT/DB: the database the hubs share")
        }
        try checkPostgresURL(store)
        var bench = CrossHubBenchmark(store: store)
        bench.template.subscribers = try a.int("subscribers", in: 1...20_000) ?? 100
        bench.template.rate = try a.int("rate", in: 1...100_000) ?? 100
        bench.template.threads = try a.int("threads", in: 1...64) ?? 1
        bench.seconds = try seconds(a, "seconds", default: 10)
        bench.rounds = try a.int("rounds", in: 1...100) ?? 3
        return .crossHub(bench)
    }

    /// `--store` takes a PostgreSQL URL (parsed for real by the hub).
    private static func checkPostgresURL(_ store: String) throws(UsageError) {
        guard store.hasPrefix("postgres://") || store.hasPrefix("postgresql://") else {
            throw UsageError(message: "--store takes a PostgreSQL URL, postgres://USER@HOST:PORT/DB, not '\(store)'")
        }
    }

    private static func writes(_ a: Arguments) throws(UsageError) -> BenchRun {
        let counts = try intList(a, "writers", default: [1, 10, 100], in: 1...10_000)
        var bench = WriteBenchmark()
        bench.seconds = try seconds(a, "seconds", default: 10)
        bench.durability = try durabilityMode(a)
        bench.records = try a.int("records", in: 1...100_000_000)
        bench.threads = try a.int("threads", in: 1...64) ?? 1
        bench.store = a.string("store")
        bench.hubs = try a.int("hubs", in: 1...16) ?? 1
        if bench.hubs > 1, bench.store == nil {
            throw UsageError(message: "--hubs needs --store: several hubs share one PostgreSQL database")
        }
        if let store = bench.store { try checkPostgresURL(store) }
        return .writes(bench, writerCounts: counts)
    }

    private static func startup(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = BrokerStartupBenchmark()
        if a.flag("orders") { bench.kind = .orders }
        bench.records = try a.int("records", in: 1...100_000_000) ?? 1_000_000
        bench.starts = try a.int("starts", in: 1...100) ?? 3
        // Orders through one connection: more would keep more orders open
        // at once, and the list of open orders is rewritten whole per change.
        bench.connections = try a.int("connections", in: 1...64) ?? (bench.kind == .orders ? 1 : 4)
        bench.fillDurability = a.string("fill-durability") ?? "full"
        return .startup(bench)
    }

    private static func soak(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = SoakBenchmark()
        bench.seconds = try seconds(a, "seconds", default: 600)
        guard bench.seconds >= 1 else { throw UsageError(message: "--seconds must be at least 1") }
        bench.writers = try a.int("writers", in: 1...1000) ?? 20
        bench.rate = Double(try a.int("rate", in: 1...100_000) ?? 840)
        bench.subscribers = try a.int("subscribers", in: 0...20_000) ?? 210
        bench.reconnecting = try a.int("reconnecting", in: 0...10_000) ?? 30
        if let text = a.string("reconnect-every") {
            let parts = text.split(separator: "-").compactMap { Double($0) }
            guard parts.count == 2, parts[0] > 0, parts[0] <= parts[1] else {
                throw UsageError(message: "--reconnect-every takes LOW-HIGH seconds, e.g. 5-10, not '\(text)'")
            }
            bench.reconnectPeriod = parts[0]...parts[1]
        }
        if a.string("interval") != nil {
            let interval = try seconds(a, "interval", default: 0)
            guard interval >= 0.5 else { throw UsageError(message: "--interval must be at least 0.5 seconds") }
            bench.sampleSeconds = interval
        }
        bench.durability = try durabilityMode(a)
        bench.threads = try a.int("threads", in: 1...64) ?? 1
        switch (a.string("url"), try a.int("hub-pid", in: 1...Int(Int32.max))) {
        case (let url?, let pid?): bench.hub = (url, Int32(pid))
        case (nil, nil): break
        default: throw UsageError(message: "--url and --hub-pid go together: the hub to load and the process to measure")
        }
        return .soak(bench)
    }

    private static func analysis(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = AnalysisBenchmark()
        bench.photos = try a.int("photos", in: 1...1000) ?? bench.photos
        bench.formats = try names(a, "formats", default: "jpeg,webp,png", takes: "jpeg, webp and/or png")
        if let text = a.string("size") {
            let parts = text.split(separator: "x").compactMap { Int($0) }
            guard parts.count == 2, (16...12_000).contains(parts[0]), (16...12_000).contains(parts[1]) else {
                throw UsageError(message: "--size takes WIDTHxHEIGHT, each 16 to 12000 pixels, e.g. 4000x3000, not '\(text)'")
            }
            (bench.width, bench.height) = (parts[0], parts[1])
        }
        return .analysis(bench)
    }

    private static func analysisFanout(_ a: Arguments) throws(UsageError) -> BenchRun {
        var template = FanoutBenchmark(broker: .tally, mode: .events)
        template.subscribers = try a.int("subscribers", in: 1...20_000) ?? 100
        template.rate = try a.int("rate", in: 1...100_000) ?? 100
        template.threads = try a.int("threads", in: 1...64) ?? 1
        template.durability = try durabilityMode(a)
        var bench = AnalysisFanoutBenchmark(template: template)
        bench.seconds = try seconds(a, "seconds", default: bench.seconds)
        guard bench.seconds > 0 else { throw UsageError(message: "--seconds must be more than 0") }
        bench.rounds = try a.int("rounds", in: 1...100) ?? bench.rounds
        bench.inflight = try a.int("inflight", in: 1...64) ?? bench.inflight
        bench.photos = try a.int("photos", in: 1...100) ?? bench.photos
        bench.analysisWaitSeconds = try seconds(a, "wait", default: bench.analysisWaitSeconds)
        if let config = a.string("config") { bench.hubArguments = ["--config", config] }
        return .analysisFanout(bench)
    }

    private static func history(_ a: Arguments) throws(UsageError) -> BenchRun {
        var bench = HistoryBenchmark()
        bench.sizes = try intList(a, "sizes", default: bench.sizes, in: 0...100_000_000)
        bench.listEntries = try a.int("list-entries", in: 0...100_000_000) ?? bench.listEntries
        bench.list = a.string("list") ?? bench.list
        bench.seconds = try seconds(a, "seconds", default: bench.seconds)
        guard bench.seconds > 0 else { throw UsageError(message: "--seconds must be more than 0") }
        bench.connections = try intList(a, "connections", default: bench.connections, in: 1...10_000)
        bench.window = try a.int("window", in: 1...100_000) ?? bench.window
        bench.fillConnections = try a.int("fill-connections", in: 1...64) ?? bench.fillConnections
        bench.batch = try a.int("fill-batch", in: 1...1000) ?? bench.batch
        bench.durability = try durabilityMode(a)
        bench.threads = try a.int("threads", in: 1...64) ?? 1
        return .history(bench, json: a.flag("json"))
    }
}
