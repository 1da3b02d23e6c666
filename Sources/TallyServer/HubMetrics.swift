import Synchronization
import TallyConcurrency
import TallyNet
import TallyStore

/// The sync engine's figures for `/metrics`, written by the core and store
/// threads and read by whichever loop serves the scrape.
final class HubMetrics: Sendable {
    let sessions = Atomic<Int>(0)
    let subscriptions = Atomic<Int>(0)
    let requests = Atomic<Int>(0)
    let requestErrors = Atomic<Int>(0)
    let changes = Atomic<Int>(0)
    let pushes = Atomic<Int>(0)
    let events = Atomic<Int>(0)
    let eventDeliveries = Atomic<Int>(0)
    let commits = Atomic<Int>(0)
    /// Commits done by the event loop that brought the writes, the store
    /// writer being idle (see `InPlaceCommitting.commitQueued`).
    let commitsInPlace = Atomic<Int>(0)
    let committedUnits = Atomic<Int>(0)
    let commitNanos = Atomic<Int>(0)
    let headSeq = Atomic<Int>(0)
    let committedSeq = Atomic<Int>(0)
    let floorSeq = Atomic<Int>(0)
    let heldOutputs = Atomic<Int>(0)
    let authFailures = Atomic<Int>(0)
    let clientLagMax = Atomic<Int>(0)
    let clients = Atomic<Int>(0)
    let clientOutboxTotal = Atomic<Int>(0)
    let denied = Atomic<Int>(0)
    let browserRefusals = Atomic<Int>(0)
    /// WebSocket connections that have not authenticated yet (a hub with users).
    let unauthenticated = Atomic<Int>(0)
    /// Commits that failed (a full disk, an I/O error), and the accepted
    /// changes dropped with them (see HubCore+StorageFaults.swift).
    let commitFailures = Atomic<Int>(0)
    let rolledBackChanges = Atomic<Int>(0)
    /// Batches of core work done by the core thread, and done in place by
    /// the thread that brought them (a loop, the store writer) while the
    /// core was idle.
    let coreBatchesQueued = Atomic<Int>(0)
    let coreBatchesInPlace = Atomic<Int>(0)
    /// Workflow stats counted from every record of a workflow (no stats
    /// record to read them back from, or one that does not fit the config):
    /// O(history) each, so after a restart this should stay at 0.
    let statsRecounts = Atomic<Int>(0)
    /// A store shared with other hubs (see HubCore+SharedStore.swift): the
    /// store's last reading of the global head, and how often this hub's
    /// work had to follow another hub's.
    let sharedStore = Atomic<Bool>(false)
    let storeReachable = Atomic<Bool>(false)
    let storeHead = Atomic<Int>(0)
    let storeRoundTripMicros = Atomic<Int>(0)
    /// Groups refused because another hub committed first, the writes run
    /// again after them, and other hubs' changes applied here.
    let headMoves = Atomic<Int>(0)
    let reruns = Atomic<Int>(0)
    let caughtUpChanges = Atomic<Int>(0)

    /// Keeps the store watch's latest reading.
    func storeReading(_ reading: HeadReading) {
        storeReachable.store(reading.reachable, ordering: .relaxed)
        if let head = reading.head {
            storeHead.store(Int(head), ordering: .relaxed)
            storeRoundTripMicros.store(Int(reading.roundTripMicros), ordering: .relaxed)
        }
    }

    /// The global head as far as this hub knows: the store's last reading,
    /// or its own commits since (the watch does not report those).
    var globalHead: Int {
        max(storeHead.load(ordering: .relaxed), committedSeq.load(ordering: .relaxed))
    }

    /// How far this hub's applied changes are behind the global head.
    var storeLag: Int {
        globalHead - committedSeq.load(ordering: .relaxed)
    }

    /// Commit latency histogram, seconds (Prometheus `le` buckets).
    static let bucketBounds: [Double] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1]
    private let buckets = LockedValueBox<[Int]>(Array(repeating: 0, count: 11))

    func recordCommit(nanos: UInt64, units: Int, inPlace: Bool) {
        commits.add(1, ordering: .relaxed)
        if inPlace { commitsInPlace.add(1, ordering: .relaxed) }
        committedUnits.add(units, ordering: .relaxed)
        commitNanos.add(Int(nanos), ordering: .relaxed)
        let seconds = Double(nanos) / 1e9
        let index = Self.bucketBounds.firstIndex { seconds <= $0 } ?? Self.bucketBounds.count
        buckets.withLock { $0[index] += 1 }
    }

    var prometheusText: String {
        func value(_ atomic: borrowing Atomic<Int>) -> Int { atomic.load(ordering: .relaxed) }
        var text = ""
        func metric(_ name: String, _ type: String, _ help: String, _ number: Int) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(number)\n"
        }
        metric("tally_sessions", "gauge", "Open sync protocol connections.", value(sessions))
        metric("tally_subscriptions", "gauge", "Active subscriptions (records, paths, lists, prefixes, topics).", value(subscriptions))
        metric("tally_requests_total", "counter", "Client requests handled (WebSocket and REST).", value(requests))
        metric("tally_request_errors_total", "counter", "Requests answered with an error.", value(requestErrors))
        metric("tally_changes_total", "counter", "Accepted changes (records and lists).", value(changes))
        metric("tally_pushes_total", "counter", "Change pushes delivered to connections.", value(pushes))
        metric("tally_events_total", "counter", "Events published.", value(events))
        metric("tally_event_deliveries_total", "counter", "Events delivered to connections.", value(eventDeliveries))
        metric("tally_commits_total", "counter", "Storage transactions committed (group commits).", value(commits))
        metric("tally_commits_in_place_total", "counter",
               "Commits done by the event loop that received the writes, the store writer being idle.",
               value(commitsInPlace))
        metric("tally_committed_writes_total", "counter", "Client writes committed.", value(committedUnits))
        metric("tally_head_seq", "gauge", "Highest sequence number assigned.", value(headSeq))
        metric("tally_committed_seq", "gauge", "Highest sequence number committed.", value(committedSeq))
        metric("tally_change_log_floor_seq", "gauge", "Highest sequence number no longer kept in the change log.", value(floorSeq))
        metric("tally_change_log_size", "gauge", "Changes kept in the change log.",
               max(0, value(committedSeq) - value(floorSeq)))
        metric("tally_commit_failures_total", "counter",
               "Commits that failed (disk full, I/O error); their writes were answered storage_failed.",
               value(commitFailures))
        metric("tally_rolled_back_changes_total", "counter",
               "Accepted changes dropped because their commit, or one before them, failed.", value(rolledBackChanges))
        metric("tally_held_outputs", "gauge", "Replies and pushes waiting for their commit.", value(heldOutputs))
        metric("tally_clients", "gauge", "Connected clients that said hello (updated each second).", value(clients))
        metric("tally_client_lag_max", "gauge", "Largest seqs-behind-head of a connected client (updated each second).", value(clientLagMax))
        metric("tally_client_outbox_total", "gauge", "Writes waiting in connected clients' outboxes, as they reported.", value(clientOutboxTotal))
        metric("tally_auth_failures_total", "counter", "Requests refused for a missing or unknown token.", value(authFailures))
        metric("tally_denied_total", "counter", "Operations refused by the access rules or a workflow's roles.", value(denied))
        metric("tally_browser_refusals_total", "counter", "Requests refused for their Origin or Host (cross-site pages, DNS rebinding).", value(browserRefusals))
        metric("tally_unauthenticated_connections", "gauge", "WebSocket connections that have not sent a valid token yet.", value(unauthenticated))
        metric("tally_workflow_stats_recounts_total", "counter",
               "Workflow stats counted from every record of the workflow instead of read back from its stats record.",
               value(statsRecounts))
        if sharedStore.load(ordering: .relaxed) {
            metric("tally_store_reachable", "gauge", "Whether the shared store (PostgreSQL) answered its last read (1) or not (0).",
                   storeReachable.load(ordering: .relaxed) ? 1 : 0)
            text += "# HELP tally_store_round_trip_seconds The last timed read of the shared store's head, a round trip.\n"
            text += "# TYPE tally_store_round_trip_seconds gauge\n"
            text += "tally_store_round_trip_seconds \(Double(value(storeRoundTripMicros)) / 1e6)\n"
            metric("tally_store_head_seq", "gauge", "The global head: the highest seq any hub committed.", globalHead)
            metric("tally_store_lag", "gauge", "Changes of other hubs this hub has not applied yet (global head minus committed seq).",
                   storeLag)
            metric("tally_store_head_moves_total", "counter",
                   "Group commits refused because another hub committed first; their writes ran again.", value(headMoves))
            metric("tally_store_reruns_total", "counter", "Writes run again after another hub's commit.", value(reruns))
            metric("tally_store_caught_up_changes_total", "counter", "Changes of other hubs applied by this hub.",
                   value(caughtUpChanges))
        }
        text += "# HELP tally_core_batches_total Batches of core work, by the thread that did them.\n"
        text += "# TYPE tally_core_batches_total counter\n"
        text += "tally_core_batches_total{thread=\"core\"} \(value(coreBatchesQueued))\n"
        text += "tally_core_batches_total{thread=\"in_place\"} \(value(coreBatchesInPlace))\n"
        text += "# HELP tally_commit_latency_seconds Time to commit one group of writes.\n"
        text += "# TYPE tally_commit_latency_seconds histogram\n"
        let counts = buckets.withLock { $0 }
        var cumulative = 0
        for (index, bound) in Self.bucketBounds.enumerated() {
            cumulative += counts[index]
            text += "tally_commit_latency_seconds_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        cumulative += counts[Self.bucketBounds.count]
        text += "tally_commit_latency_seconds_bucket{le=\"+Inf\"} \(cumulative)\n"
        text += "tally_commit_latency_seconds_sum \(Double(value(commitNanos)) / 1e9)\n"
        text += "tally_commit_latency_seconds_count \(cumulative)\n"
        return text
    }

    /// The store's background failures, read at scrape time.
    static func prometheusText(_ health: StoreHealth) -> String {
        "# HELP tally_checkpoint_failures_total WAL checkpoints that failed (each is tried again).\n"
            + "# TYPE tally_checkpoint_failures_total counter\n"
            + "tally_checkpoint_failures_total \(health.checkpointFailures)\n"
            + "# HELP tally_prune_failures_total Retention steps that failed (each is tried again).\n"
            + "# TYPE tally_prune_failures_total counter\n"
            + "tally_prune_failures_total \(health.pruneFailures)\n"
    }
}
