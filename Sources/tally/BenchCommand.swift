@preconcurrency import Glibc
import TallyBench
import TallyNet
import TallyTLS

/// `tally bench …`: load generators that print a table.
enum BenchCommand {
    static let help = """
    Usage: tally bench echo [options]
           tally bench connections [options]

    echo          round trips against a WebSocket echo endpoint: latency and messages/s
      --url URL             (default ws://127.0.0.1:8080/echo)
      --connections C       concurrent connections (default 10)
      --messages N          round trips per connection (default 10000)
      --size BYTES          message size (default 64)
      --threads N           client event-loop threads (default 1)
      --no-compression      do not offer permessage-deflate

    connections   opens many idle WebSocket connections; with --server-pid, the
                  server's resident memory per connection
      --url URL             (default ws://127.0.0.1:8080/echo)
      --count N             connections to open (default 10000)
      --server-pid PID      process whose /proc/PID/status VmRSS is read
      --concurrency K       handshakes in flight at once (default 200)
      --threads N           client event-loop threads (default 2)
      --subprotocol P       offer this subprotocol (e.g. mqtt for Mosquitto)
      --compression         offer permessage-deflate (idle connections should
                            still hold no zlib memory)
      --insecure            for wss:// URLs: accept any certificate
    """

    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        guard let which = args.first, which != "--help", which != "help" else { print(help); return 0 }
        switch which {
        case "echo": return try echo(args.dropFirst())
        case "connections": return try connections(args.dropFirst())
        default: throw UsageError(message: "unknown benchmark '\(which)': use echo or connections")
        }
    }

    private static func echo(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "bench echo",
                              valued: ["url", "connections", "messages", "size", "threads"],
                              flags: ["no-compression", "insecure", "help"])
        if a.flag("help") { print(help); return 0 }
        try a.noPositionals("bench echo")
        var bench = EchoBenchmark(url: a.string("url") ?? "ws://127.0.0.1:8080/echo")
        bench.connections = try a.int("connections", in: 1...10_000) ?? 10
        bench.messagesPerConnection = try a.int("messages", in: 1...100_000_000) ?? 10_000
        bench.size = try a.int("size", in: 0...(64 << 20)) ?? 64
        bench.options.deflate.enabled = !a.flag("no-compression")
        if a.flag("insecure") { bench.tls = try? TLSContext.client(verifyPeer: false) }
        raiseDescriptorLimit()
        do {
            let group = try EventLoopGroup(threads: try a.int("threads", in: 1...64) ?? 1)
            let r = try bench.run(group: group)
            print(renderTable([
                ["connections", "size (B)", "messages", "seconds", "msgs/s", "p50 (µs)", "p90 (µs)", "p99 (µs)", "max (µs)"],
                [String(bench.connections), String(bench.size), String(r.messages), format(r.seconds, 2),
                 format(r.messagesPerSecond, 0), format(r.latency.p50), format(r.latency.p90),
                 format(r.latency.p99), format(r.latency.max)],
            ]), terminator: "")
            return 0
        } catch {
            printError("\(error)")
            return 1
        }
    }

    private static func connections(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "bench connections",
                              valued: ["url", "count", "server-pid", "concurrency", "threads", "subprotocol"],
                              flags: ["compression", "insecure", "help"])
        if a.flag("help") { print(help); return 0 }
        try a.noPositionals("bench connections")
        var bench = ConnectionsBenchmark(url: a.string("url") ?? "ws://127.0.0.1:8080/echo")
        bench.count = try a.int("count", in: 1...1_000_000) ?? 10_000
        bench.concurrency = try a.int("concurrency", in: 1...10_000) ?? 200
        bench.serverPID = try a.int("server-pid", in: 1...Int(Int32.max)).map { Int32($0) }
        bench.options.deflate.enabled = a.flag("compression")
        if a.flag("insecure") { bench.tls = try? TLSContext.client(verifyPeer: false) }
        if let subprotocol = a.string("subprotocol") { bench.subprotocols = [subprotocol] }
        raiseDescriptorLimit()
        do {
            let group = try EventLoopGroup(threads: try a.int("threads", in: 1...64) ?? 2)
            let r = try bench.run(group: group) { opened in
                fputs("\r  opened \(opened)", stderr)
            }
            fputs("\n", stderr)
            let perConnection = r.bytesPerConnection.map { format($0 / 1024, 2) } ?? "n/a"
            print(renderTable([
                ["connections", "failed", "open time (s)", "server RSS before (KiB)", "after (KiB)",
                 "KiB per connection", "new connection (ms)", "echo (ms)"],
                [String(r.opened), String(r.failed), format(r.seconds, 2), r.rssBeforeKiB.map(String.init) ?? "n/a",
                 r.rssAfterKiB.map(String.init) ?? "n/a", perConnection, format(r.newConnectionMillis, 2),
                 r.echoMillis.map { format($0, 2) } ?? "n/a"],
            ]), terminator: "")
            return r.failed == 0 ? 0 : 1
        } catch {
            printError("\(error)")
            return 1
        }
    }
}
