import TallyClient
import TallyProtocol

/// What `tally mirror run` holds while it runs: its store, opened (created
/// if needed) and locked so that no other run uses it, and what to mirror
/// from where — as given, else as the store's last run had it.
public final class MirrorRun {
    public let path: String
    public let store: MirrorStore
    /// `orders/` (a prefix, with its workflow's list) or a name.
    public let patterns: [String]
    /// The hub (or the hubs of one cluster) and the token; without a hub
    /// given, the one (or the list) of the last run.
    public let access: HubAccess
    private let lock: MirrorRunLock

    /// Why a run cannot start.
    public enum Refusal: Error, Equatable {
        /// Another `mirror run` holds the store.
        case busy(store: String)
        /// No patterns given, and no earlier run stored any.
        case noPatterns
    }

    /// Opens and locks the store at `path`. Throws a `Refusal`, the
    /// store's `MirrorStoreError`, or `HubError.insecureToken` when the
    /// token would travel in clear text; a refused start leaves no lock.
    public init(store path: String, patterns: [String], access: HubAccess) throws {
        self.path = path
        store = try MirrorStore.open(path, create: true)
        guard let lock = try MirrorRunLock.acquire(store: path) else { throw Refusal.busy(store: path) }
        self.lock = lock
        do {
            var patterns = patterns, access = access
            if patterns.isEmpty, let stored = try store.meta("patterns"),
               let list = (try? JSONValue.parse(stored))?.arrayValue?.compactMap(\.stringValue) {
                patterns = list
            }
            if access.servers.isEmpty, let hub = try store.meta("hub") {
                access.servers = (try? HubAccess.parseList(hub)) ?? [hub]
            }
            guard !patterns.isEmpty else { throw Refusal.noPatterns }
            try access.checkTransports()
            (self.patterns, self.access) = (patterns, access)
        } catch {
            lock.release()
            throw error
        }
    }

    /// The sync's settings for a run that goes on for hours: a client id
    /// stable for this store, the hubs as they were named (kept in the store
    /// for the next run; a lost hub gives way to the next), and timeouts that
    /// notice a silent hub within seconds (ping every 3 s, idle after 10 s,
    /// connect within 6 s, a request within 15 s).
    public func configuration(policies: PolicyTable) -> MirrorSync.Configuration {
        var configuration = MirrorSync.Configuration(urls: access.urls, token: access.token,
                                                     clientID: MirrorSync.clientID(store: path), patterns: patterns)
        configuration.serverLabel = access.label
        configuration.policies = policies
        configuration.options.requestTimeoutMillis = 15_000
        configuration.options.pingIntervalMillis = 3_000
        configuration.options.idleTimeoutMillis = 10_000
        configuration.options.connectTimeoutMillis = 6_000
        let access = access
        configuration.fetchWorkflows = { WorkflowCatalog.fetchJSON(access) }
        return configuration
    }

    /// Lets another run have the store.
    public func release() { lock.release() }
}
