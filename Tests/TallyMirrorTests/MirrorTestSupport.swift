@preconcurrency import Glibc
import Testing
import TallyClient
@testable import TallyMirror
import TallyNet
import TallyProtocol
import TallyServer
import TallyHubTestSupport
import TallyTestSupport

// A hub in this process and mirrors of it, for testing MirrorSync against
// the real thing. "Offline" writes are made with the sync stopped (as
// `tally mirror set` does from another process); every wait polls the store
// with a deadline.

/// The hub the mirror tests sync with: on its own temporary directory.
func makeTestHub() throws -> RestartableHub { try RestartableHub.temporary(prefix: "mirror-hub") }

extension RestartableHub {
    /// A short-lived client for checking and changing the hub directly.
    func client() async throws -> TallyClient {
        var options = TallyClient.Options()
        options.honourRetryAfter = false
        let client = try TallyClient(url: url, clientName: "checker", options: options)
        client.connect()
        return client
    }
}

func waitFor(_ what: String, timeoutMillis: Int = 20_000, _ condition: () throws -> Bool) async throws {
    try await poll(what, timeoutMillis: timeoutMillis, intervalMillis: 20, until: condition)
}

/// One mirror: its store file and, while running, its sync.
final class TestMirror {
    let path: String
    let directory: TemporaryDirectory
    let patterns: [String]
    let policies: PolicyTable
    private(set) var sync: MirrorSync?
    let store: MirrorStore

    init(patterns: [String], policies: PolicyTable = PolicyTable()) throws {
        directory = try TemporaryDirectory(prefix: "mirror")
        path = directory.path + "/m.sqlite"
        self.patterns = patterns
        self.policies = policies
        store = try MirrorStore(path: path)
    }

    /// - Parameters:
    ///   - honourRetryAfter: wait the `retryAfterMs` of a hub that just
    ///     started, as `mirror run` does (off: tests restart hubs often).
    ///   - progress: the sync's resync progress, on its queue.
    ///   - others: more hubs of the cluster, after `url` (`--server a,b`).
    func start(_ url: String, others: [String] = [], honourRetryAfter: Bool = false,
               progress: (@Sendable (ResyncState?) -> Void)? = nil) throws {
        var configuration = MirrorSync.Configuration(urls: [url] + others, token: nil,
                                                     clientID: "mirror:test:\(path.hashValue)", patterns: patterns)
        configuration.policies = policies
        configuration.options.backoff = Backoff(baseMillis: 20, capMillis: 200)
        configuration.options.honourRetryAfter = honourRetryAfter
        configuration.progress = progress
        let sync = try MirrorSync(store: try MirrorStore(path: path), configuration: configuration)
        sync.start()
        self.sync = sync
    }

    func stop() {
        sync?.stop()
        sync = nil
    }

    /// Runs once against `url` until the store holds `names`, then stops:
    /// writes made from here on are offline writes.
    func syncOnce(_ url: String, holding names: [String]) async throws {
        try start(url)
        try await waitFor("the snapshot of \(names)") { try names.allSatisfy { try store.record($0) != nil } }
        stop()
    }

    var online: Bool { (try? store.meta("online")) == "1" }

    /// Online with an empty outbox and nothing in flight.
    func waitConverged(_ what: String = "the mirror to converge") async throws {
        try await waitFor(what) {
            guard online else { return false }
            return try store.outboxDepth() == 0
        }
    }

    deinit { stop() }
}
