@preconcurrency import Glibc
import Testing
import TallyClient
import TallyConcurrency
import TallyNet
import TallyProtocol
import TallyServer
import TallyStore
import TallyHubTestSupport
import TallyTestSupport

// Helpers to wait for what a client's queue reports (the hub itself is
// TallyHubTestSupport's RestartableHub). Waits poll with a deadline;
// nothing sleeps to synchronise.

/// Collects values reported on a client's queue; `wait` polls them.
final class Recorder<Value: Sendable>: Sendable {
    private let values = LockedValueBox<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
    func removeAll() { values.withLock { $0.removeAll() } }

    /// Waits until `predicate` holds for the values so far; fails after `timeout`.
    @discardableResult
    func wait(timeoutMillis: Int = 10_000, _ what: String = "a condition",
              sourceLocation: SourceLocation = #_sourceLocation,
              until predicate: ([Value]) -> Bool) async throws -> [Value] {
        var snapshot: [Value] = []
        do {
            try await poll(what, timeoutMillis: timeoutMillis) {
                snapshot = all
                return predicate(snapshot)
            }
        } catch let error as TestFailure {
            Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
            throw error
        }
        return snapshot
    }
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
