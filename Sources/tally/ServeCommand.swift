@preconcurrency import Glibc
import TallyNet
import TallyPostgres
import TallyServer
import TallyStore
import TallyTLS
import TallyBench
import TallyCommandLine

/// `tally serve`: runs the hub until SIGINT or SIGTERM.
enum ServeCommand {
    static let help = """
    Usage: tally serve [options]

    Runs the hub: HTTP and WebSocket on one port. Stops gracefully on SIGINT or
    SIGTERM (stops accepting, closes WebSockets with 1001, flushes).

    Options:
    \(options.help)
    """

    static let options = OptionTable(column: 27, [
        Option("host", "H", "address to bind (default 127.0.0.1)"),
        Option("port", "P", "port (default 8080; 0 picks a free one)"),
        Option("data", "DIR", "where the SQLite store and photos live (default", "./tally-data); one hub per directory (it is",
               "locked); :memory: keeps nothing on disk"),
        Option("store", "URL", "keep records, lists and the change log in PostgreSQL,",
               "postgres://USER[:PASSWORD]@HOST:PORT/DB (also",
               "$TALLY_STORE_URL), photos included; --data then only",
               "holds the lock"),
        Option("hub-name", "NAME", "this hub's name in /v1/admin/clients (default",
               "HOSTNAME:PORT); each hub on one database needs its own"),
        Option("config", "FILE", "JSON settings file (see README): users and tokens,", "roles, workflows, limits; flags win over it"),
        Option("open", nil, "serve without authentication on an address that", "is not loopback (no users configured)"),
        Option("demo", nil, "start with sample items, orders and intake jobs,", "and a simulator that moves them along"),
        Option("demo-interval", "SECONDS", "the simulator's mean pause between moves", "(default 2.5)"),
        Option("durability", "MODE", "full (default), normal or off: SQLite synchronous", "setting; only full survives a power loss"),
        Option("retain-changes", "N", "changes kept in the log for resume (default 1000000)"),
        Option("retain-bytes", "SIZE", "bytes of pushes kept in the log for resume, e.g.", "256M (default 1G); the oldest go first"),
        Option("retain-age", "SECONDS", "oldest change kept for resume (default 604800, 7 days)"),
        Option("max-record-size", "SIZE", "largest record data, e.g. 256K (default 1M)"),
        Option("blob-quota", "SIZE", "most bytes all photos together may take, e.g. 50G",
               "(default 10G); an upload past it is refused (507)"),
        Option("cache-size", "SIZE", "memory for records and lists read or written", "recently, e.g. 256M (default 16M; at least 1M)"),
        Option("threads", "N", "event-loop threads (default: number of cores)"),
        Option("tls-cert", "FILE", "PEM certificate chain: serve https:// and wss://"),
        Option("tls-key", "FILE", "PEM private key for --tls-cert"),
        Option("echo", nil, "serve the WebSocket echo endpoint /echo even on a", "hub with users (by default only in open mode)"),
        Option("no-echo", nil, "do not serve /echo"),
        Option("allow-origin", "ORIGIN", "also take WebSocket upgrades and HTTP writes from",
               "web pages at ORIGIN (https://app.example:8443);", "repeatable. Default: the hub's own origin only"),
        Option("allow-host", "NAME", "in open mode, also answer to Host NAME (default:",
               "loopback names and addresses; with --open, any", "address); repeatable"),
        Option("peers", "URL,URL…", "the other hubs of this cluster (same --store):",
               "GET /v1/hubs lists them, so the board moves to one",
               "when this hub goes; their pages may connect here"),
        Option("max-subscriptions", "N", "subscriptions per connection (default 100000)"),
        Option("max-unauthenticated", "N", "WebSocket connections that have not sent a valid", "token yet, hub-wide (default 1000)"),
        Option("no-compression", nil, "refuse permessage-deflate"),
        Option("max-message-size", "SIZE", "largest WebSocket message, e.g. 1M (default 16M)"),
        Option("max-outbound", "SIZE", "per-connection send buffer bound (default 8M);", "a connection past it is closed with 1008"),
        Option("ping-interval", "SECONDS", "ping a silent WebSocket after this long (default 30)"),
        Option("idle-timeout", "SECONDS", "close a WebSocket silent this long (default 75)"),
        Option("log-level", "LEVEL", "debug, info, warning or error (default info)"),
        Option("web", "DIR", "the dashboard's Clients directory (web/, js/),", "served at / (default: Clients/ of the checkout",
               "holding this binary or the current directory)"),
    ])

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        let arguments = try Arguments(args, command: "serve", options: options)
        if arguments.flag("help") { print(help); return 0 }
        try arguments.noPositionals("serve")
        var file: HubConfigFile?
        if let path = arguments.string("config") {
            do { file = try HubConfigFile.load(path: path) } catch { throw CommandFailure.configFile(path: path, error) }
        }
        let flags = try overrides(arguments)
        var configuration = HubConfiguration(file: file, overrides: flags)
        switch (arguments.string("tls-cert"), arguments.string("tls-key")) {
        case (let cert?, let key?):
            do {
                configuration.server.tls = try TLSContext.server(certificateChainFile: cert, privateKeyFile: key)
            } catch {
                throw CommandFailure.certificate(error)
            }
        case (nil, nil):
            break
        default:
            throw UsageError(message: "--tls-cert and --tls-key go together")
        }
        let demoInterval = Int(try arguments.millis("demo-interval") ?? 2500)
        if arguments.string("demo-interval") != nil, !arguments.flag("demo") {
            throw UsageError(message: "--demo-interval goes with --demo")
        }
        if configuration.exposesOpenMode { throw CommandFailure.unauthenticatedNetwork(host: configuration.server.host) }

        // Block the stop signals in every thread (the loops inherit the mask),
        // then wait for them here.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        raiseDescriptorLimit()
        ProcessMemory.returnLargeFreedBlocks()

        let hub = try Hub(configuration: configuration)
        let logger = configuration.server.logger
        configuration.logStarted(port: hub.port)
        print("tally listening on \(configuration.address(port: hub.port))")
        if configuration.core.authenticator == nil {
            print("open mode: no users configured, so there is no authentication and every client acts as admin\(HostLiteral.isLoopback(configuration.server.host) ? " (loopback only)" : " (--open)")")
        }
        fflush(stdout)

        var demo: DemoSimulator?
        if arguments.flag("demo") {
            demo = DemoSimulator(core: hub.core, blobs: hub.blobs, intervalMillis: demoInterval)
            demo?.start()
            print("demo: sample items, orders and intake jobs; a simulator moves them along every few seconds")
        }
        fflush(stdout)

        var received: Int32 = 0
        sigwait(&signals, &received)
        logger.info("server.stopping", ["signal": received == SIGINT ? "SIGINT" : "SIGTERM"])
        demo?.stop()
        hub.shutdown()
        logger.info("server.stopped")
        return 0
    }

    /// `--peers URL,URL…`: every element a hub's URL, the bad one named.
    static func peers(_ list: String) throws(UsageError) -> PeerHubs {
        let given = list.split(separator: ",", omittingEmptySubsequences: false).map { String($0.trimmingSpaces) }
        do { return try PeerHubs(given) } catch {
            throw UsageError(message: error.text.isEmpty ? "--peers: hub \(error.index + 1) of '\(list)' is empty"
                                                          : "--peers: hub \(error.index + 1), '\(error.text)', \(error.message)")
        }
    }

    /// The flags, checked, as the settings they override.
    static func overrides(_ a: Arguments) throws(UsageError) -> HubOverrides {
        var flags = HubOverrides()
        flags.host = a.string("host")
        flags.port = try a.int("port", in: 0...65535)
        flags.threads = try a.int("threads", in: 1...256)
        if let data = a.string("data") {
            guard !data.isEmpty else { throw UsageError(message: "--data needs a directory") }
            flags.dataDirectory = data
        }
        if let url = a.string("store") ?? environment("TALLY_STORE_URL") {
            do { _ = try PostgresURL(parsing: url) } catch {
                throw UsageError(message: "--store: \(error.message)")
            }
            flags.storeURL = url
        }
        if let name = a.string("hub-name") {
            if let problem = HubName.problem(name) { throw UsageError(message: "--hub-name \(problem), not '\(name)'") }
            flags.hubName = name
        }
        if let mode = a.string("durability") {
            guard let durability = Durability(rawValue: mode) else {
                throw UsageError(message: "--durability must be full, normal or off, not '\(mode)'")
            }
            flags.durability = durability
        }
        flags.retainChanges = try a.int("retain-changes", in: 1...Int(Int32.max))
        flags.retainBytes = try a.bytes("retain-bytes")
        if let text = a.string("retain-age") {
            guard let seconds = Double(text), seconds > 0, seconds <= 3650 * 86_400 else {
                throw UsageError(message: "--retain-age must be a number of seconds greater than 0, not '\(text)'")
            }
            flags.retainAgeSeconds = seconds
        }
        flags.maxRecordBytes = try a.bytes("max-record-size")
        flags.blobQuotaBytes = try a.bytes("blob-quota")
        if let size = try a.bytes("cache-size") {
            guard size >= 1 << 20 else { throw UsageError(message: "--cache-size must be at least 1M, not '\(a.string("cache-size") ?? "")'") }
            flags.cacheBytes = size
        }
        flags.maxMessageBytes = try a.bytes("max-message-size")
        flags.maxOutboundBytes = try a.bytes("max-outbound")
        flags.pingIntervalMillis = try a.millis("ping-interval")
        flags.idleTimeoutMillis = try a.millis("idle-timeout")
        flags.compression = !a.flag("no-compression")
        switch (a.flag("echo"), a.flag("no-echo")) {
        case (true, true): throw UsageError(message: "--echo and --no-echo contradict each other; give one")
        case (let echo, let noEcho): flags.echo = echo || noEcho ? echo : nil
        }
        flags.allowedOrigins = a.strings("allow-origin")
        if let origin = flags.allowedOrigins.first(where: { BrowserGuard.normalizedOrigin($0) == nil }) {
            throw UsageError(message: "--allow-origin takes an origin such as https://app.example or http://10.0.0.5:8080 (scheme, host, optional port; no path), not '\(origin)'")
        }
        flags.allowedHosts = a.strings("allow-host")
        if let host = flags.allowedHosts.first(where: { !BrowserGuard.isHostName($0) }) {
            throw UsageError(message: "--allow-host takes a host name such as tally.local (no scheme or port), not '\(host)'")
        }
        if let list = a.string("peers") { flags.peers = try peers(list) }
        flags.maxSubscriptions = try a.int("max-subscriptions", in: 1...10_000_000)
        flags.maxUnauthenticated = try a.int("max-unauthenticated", in: 1...10_000_000)
        flags.openNetwork = a.flag("open")
        if let web = a.string("web") {
            guard StaticFiles.isClientsDirectory(web) else {
                throw UsageError(message: "--web must be a directory holding web/index.html and js/ (the checkout's Clients/), not '\(web)'")
            }
            flags.webDirectory = web
        }
        if let level = a.string("log-level") {
            let levels: [String: Logger.Level] = ["debug": .debug, "info": .info, "warning": .warning, "error": .error]
            guard let parsed = levels[level] else {
                throw UsageError(message: "--log-level must be debug, info, warning or error, not '\(level)'")
            }
            flags.logLevel = parsed
        }
        return flags
    }
}
