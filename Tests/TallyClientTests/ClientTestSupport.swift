@preconcurrency import Glibc
import Testing
import TallyClient
import TallyNet
import TallyProtocol
import TallyServer
import TallyStore
import TallyTestSupport

// A real hub in this process (127.0.0.1, port 0 the first time, the same
// port after a restart so clients find it where they left it) and small
// helpers to wait for what a client's queue reports. Waits poll with a
// deadline; nothing sleeps to synchronise.

/// A hub that can be stopped and started again on the same data directory and port.
final class RestartableHub {
    let dataDirectory: String
    private(set) var hub: Hub?
    private(set) var port = 0
    let adjust: @Sendable (inout HubConfiguration) -> Void

    init(dataDirectory: String, adjust: @escaping @Sendable (inout HubConfiguration) -> Void = { _ in }) throws {
        self.dataDirectory = dataDirectory
        self.adjust = adjust
        try start()
    }

    var url: String { "ws://127.0.0.1:\(port)/v1/ws" }

    func configuration(port: Int) -> HubConfiguration {
        var configuration = HubConfiguration()
        configuration.server.host = "127.0.0.1"
        configuration.server.port = port
        configuration.server.threads = 1
        configuration.server.logger = .disabled
        configuration.server.shutdownGraceMillis = 500
        configuration.echo = false
        configuration.dataDirectory = dataDirectory
        adjust(&configuration)
        return configuration
    }

    /// Starts on the port it had before (port 0 the first time).
    func start() throws {
        let started = try Hub(configuration: configuration(port: port))
        hub = started
        port = started.port
    }

    func stop() {
        hub?.shutdown()
        hub = nil
    }

    /// Runs `body` against the data directory on another port, so no
    /// client that waits for the usual port can see it (changes it misses).
    func offside(_ body: (String) async throws -> Void) async throws {
        precondition(hub == nil, "stop the hub first")
        let side = try Hub(configuration: configuration(port: 0))
        defer { side.shutdown() }
        try await body("ws://127.0.0.1:\(side.port)/v1/ws")
    }

    deinit { stop() }
}

/// Collects values reported on a client's queue; `wait` polls them.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Locked<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
    func removeAll() { values.withLock { $0.removeAll() } }

    /// Waits until `predicate` holds for the values so far; fails after `timeout`.
    @discardableResult
    func wait(timeoutMillis: Int = 10_000, _ what: String = "a condition",
              sourceLocation: SourceLocation = #_sourceLocation,
              until predicate: ([Value]) -> Bool) async throws -> [Value] {
        let deadline = clockMillis() + Int64(timeoutMillis)
        while true {
            let snapshot = all
            if predicate(snapshot) { return snapshot }
            if clockMillis() > deadline {
                Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
                throw TestFailure("timed out waiting for \(what)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

func clockMillis() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// Client options for tests: quick pings, short timeouts.
func testOptions(_ adjust: (inout TallyClient.Options) -> Void = { _ in }) -> TallyClient.Options {
    var options = TallyClient.Options()
    options.requestTimeoutMillis = 5_000
    options.waitForConnectionMillis = 10_000
    options.connectTimeoutMillis = 2_000
    options.honourRetryAfter = false
    adjust(&options)
    return options
}

/// Connects a client and waits until it is live.
func liveClient(_ url: String, token: String? = nil, states: Recorder<ConnectionState>? = nil,
                options: TallyClient.Options = testOptions()) async throws -> TallyClient {
    let client = try TallyClient(url: url, token: token, clientName: "test", options: options)
    let recorder = states ?? Recorder<ConnectionState>()
    client.onStateChange { state, _ in recorder.append(state) }
    client.connect()
    try await recorder.wait(timeoutMillis: 5_000, "live") { $0.contains(.live) }
    return client
}

extension JSONObject {
    static func parse(_ text: String) -> JSONObject {
        (try? JSONValue.parse(text))?.objectValue ?? [:]
    }
}
