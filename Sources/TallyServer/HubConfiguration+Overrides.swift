import TallyEngine
import TallyNet
import TallyStore

/// How `tally serve` arrives at its configuration: the embedded defaults,
/// then the config file's members, then the command line's flags.
extension HubConfiguration {
    /// The configuration a config file (if any) and the command line's
    /// overrides make; the flags win.
    public init(file: HubConfigFile?, overrides flags: HubOverrides) {
        self.init()
        if let file { apply(file) }
        apply(flags)
    }

    private mutating func apply(_ file: HubConfigFile) {
        if let host = file.host { server.host = host }
        if let port = file.port { server.port = port }
        if let threads = file.threads { server.threads = threads }
        if let data = file.data { dataDirectory = data }
        if let name = file.hubName { hubName = name }
        if let durability = file.durability { self.durability = durability }
        if let count = file.retainChanges { retention.maxChanges = count }
        if let bytes = file.retainBytes { retention.maxBytes = bytes }
        if let age = file.retainAgeSeconds { retention.maxAge = age }
        if let size = file.maxRecordSize { core.limits.maxRecordBytes = size }
        if let size = file.maxMessageSize { server.webSocket.maxMessageSize = size }
        if let size = file.maxBlobSize { maxBlobBytes = size }
        if let echo = file.echo { self.echo = echo }
        if let origins = file.allowOrigins { allowedOrigins = origins }
        if let hosts = file.allowHosts { allowedHosts = hosts }
        if let peers = file.peers { self.peers = peers }
        if let count = file.maxSubscriptions { core.maxSubscriptionsPerConnection = count }
        if let count = file.lowStock { core.lowStock = count }
        core.indexes = file.indexes
        if let count = file.maxUnauthenticated { core.maxUnauthenticatedConnections = count }
        if let size = file.blobQuota { blobQuotaBytes = size }
        if let size = file.cacheSize { core.cacheBytes = size }
        if let analysis = file.analysis { self.analysis = analysis }
        core.planner = WorkflowPlanner(workflows: file.workflowSet, policy: file.policy)
        if let users = file.users, !users.isEmpty { core.authenticator = Authenticator(users: users) }
    }

    private mutating func apply(_ flags: HubOverrides) {
        if let host = flags.host { server.host = host }
        if let port = flags.port { server.port = port }
        if let threads = flags.threads { server.threads = threads }
        if let data = flags.dataDirectory { dataDirectory = data }
        if let url = flags.storeURL { storeURL = url }
        if let name = flags.hubName { hubName = name }
        if let durability = flags.durability { self.durability = durability }
        if let count = flags.retainChanges { retention.maxChanges = count }
        if let bytes = flags.retainBytes { retention.maxBytes = bytes }
        if let age = flags.retainAgeSeconds { retention.maxAge = age }
        if let size = flags.maxRecordBytes { core.limits.maxRecordBytes = size }
        if let size = flags.blobQuotaBytes { blobQuotaBytes = size }
        if let size = flags.cacheBytes { core.cacheBytes = size }
        if let size = flags.maxMessageBytes { server.webSocket.maxMessageSize = size }
        if let size = flags.maxOutboundBytes { server.webSocket.maxOutboundBytes = size }
        if let ms = flags.pingIntervalMillis { server.webSocket.pingIntervalMillis = ms }
        if let ms = flags.idleTimeoutMillis { server.webSocket.idleTimeoutMillis = ms }
        if !flags.compression { server.webSocket.deflate.enabled = false }
        if let echo = flags.echo { self.echo = echo }
        allowedOrigins += flags.allowedOrigins
        allowedHosts += flags.allowedHosts
        if let peers = flags.peers { self.peers = peers }
        if let count = flags.maxSubscriptions { core.maxSubscriptionsPerConnection = count }
        if let count = flags.maxUnauthenticated { core.maxUnauthenticatedConnections = count }
        openNetwork = flags.openNetwork
        webDirectory = flags.webDirectory ?? StaticFiles.locateDefault()
        if let level = flags.logLevel { server.logger.level = level }
    }

    /// Open mode (no users) on an address that is not loopback without
    /// `--open`: anyone who could reach the hub could change everything,
    /// so it must not start.
    public var exposesOpenMode: Bool {
        core.authenticator == nil && !openNetwork && !HostLiteral.isLoopback(server.host)
    }

    /// Where the hub listening on `port` is reached: `http://127.0.0.1:8080`,
    /// `https://[::1]:8443`.
    public func address(port: Int) -> String {
        let host = server.host.contains(":") ? "[\(server.host)]" : server.host
        return "\(server.tls == nil ? "http" : "https")://\(host):\(port)"
    }

    /// Logs `server.started` for the hub listening on `port`: where, how
    /// (threads, TLS, echo, durability) and who may use it.
    public func logStarted(port: Int) {
        // With a PostgreSQL store, `durability` names where it lives instead
        // (SQLite's setting does not apply), the password hidden.
        server.logger.info("server.started", ["address": address(port: port), "threads": String(server.threads),
                                              "tls": server.tls == nil ? "off" : "on", "echo": servesEcho ? "on" : "off",
                                              "hub": hubName(port: port), "data": dataDirectory,
                                              storeURL == nil ? "durability" : "store":
                                                  storeURL.map(PostgresStore.redacted) ?? durability.rawValue,
                                              "web": webDirectory ?? "none",
                                              "auth": core.authenticator.map { "tokens (\($0.users.count) users)" } ?? "open"])
    }
}
