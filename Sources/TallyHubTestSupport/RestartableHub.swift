import TallyNet
import TallyServer
import TallyTestSupport

// A real hub in the test process (127.0.0.1, port 0 the first time, the same
// port after a restart so clients find it where they left it), shared by the
// client and mirror tests.

/// A hub that can be stopped and started again on the same data directory and port.
public final class RestartableHub {
    public let dataDirectory: String
    public private(set) var hub: Hub?
    public private(set) var port = 0
    public let adjust: @Sendable (inout HubConfiguration) -> Void

    public init(dataDirectory: String, adjust: @escaping @Sendable (inout HubConfiguration) -> Void = { _ in }) throws {
        self.dataDirectory = dataDirectory
        self.adjust = adjust
        try start()
    }

    public var url: String { "ws://127.0.0.1:\(port)/v1/ws" }

    public func configuration(port: Int) -> HubConfiguration {
        var configuration = HubConfiguration.forTests(dataDirectory: dataDirectory, port: port, threads: 1,
                                                      shutdownGraceMillis: 500)
        adjust(&configuration)
        return configuration
    }

    /// Starts on the port it had before (port 0 the first time).
    public func start() throws {
        let started = try Hub(configuration: configuration(port: port))
        hub = started
        port = started.port
    }

    public func stop() {
        hub?.shutdown()
        hub = nil
    }

    /// Runs `body` against the data directory on another port, so no
    /// client that waits for the usual port can see it (changes it misses).
    public func offside(_ body: (String) async throws -> Void) async throws {
        precondition(hub == nil, "stop the hub first")
        let side = try Hub(configuration: configuration(port: 0))
        defer { side.shutdown() }
        try await body("ws://127.0.0.1:\(side.port)/v1/ws")
    }

    /// A hub on a fresh temporary directory, removed when the hub goes.
    public static func temporary(prefix: String = "tally-hub",
                                 adjust: @escaping @Sendable (inout HubConfiguration) -> Void = { _ in }) throws -> RestartableHub {
        let directory = try TemporaryDirectory(prefix: prefix)
        let hub = try RestartableHub(dataDirectory: directory.path, adjust: adjust)
        hub.ownedDirectory = directory
        return hub
    }

    private var ownedDirectory: TemporaryDirectory?

    deinit { stop() }
}

extension HubConfiguration {
    /// A hub for tests: 127.0.0.1 (`port` 0: any free one), no log, no
    /// echo endpoint, the store in `dataDirectory` (":memory:" for none).
    public static func forTests(dataDirectory: String, port: Int = 0, threads: Int,
                                shutdownGraceMillis: Int64) -> HubConfiguration {
        var configuration = HubConfiguration()
        configuration.server = .forTests(port: port, threads: threads, shutdownGraceMillis: shutdownGraceMillis)
        configuration.echo = false
        configuration.dataDirectory = dataDirectory
        return configuration
    }
}

extension ServerConfiguration {
    /// A server for tests (a hub's, or a scripted endpoint's): 127.0.0.1
    /// (`port` 0: any free one), no log.
    public static func forTests(port: Int = 0, threads: Int, shutdownGraceMillis: Int64) -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = port
        configuration.threads = threads
        configuration.logger = .disabled
        configuration.shutdownGraceMillis = shutdownGraceMillis
        return configuration
    }
}
