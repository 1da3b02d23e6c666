@preconcurrency import Glibc
import TallyEngine
import TallyHTTP
import TallyProtocol
import TallyStore

/// Sync health: how far behind each connected client is, what it still has
/// to send, and spreading out the resyncs after a restart.
extension HubCore {
    /// For `retryWindowMillis` after start, each hello is told to wait a
    /// random 0…`maxRetryDelayMillis` before a large resync, so thousands of
    /// clients reconnecting to a restarted hub do not all resync at once.
    static let retryWindowMillis: Int64 = 30_000
    static let maxRetryDelayMillis: Int64 = 5_000

    func retryAfter() -> Int64? {
        guard configuration.clock() - startedAt < Self.retryWindowMillis else { return nil }
        return Int64.random(in: 0...Self.maxRetryDelayMillis)
    }

    /// A store reading older than this says nothing any more: the watch
    /// reads at least every second while the store answers.
    static let staleReadingMillis: Int64 = 5_000

    /// `GET /healthz`, answered on the loop (no core work): `{"status":"ok"}`
    /// for a hub on its own store. A hub on a shared store (PostgreSQL) adds
    /// whether it reaches it, the round trip of the last read, the global
    /// head and how far behind it this hub is, and is not ready — 503
    /// `{"status":"unavailable",…}` — while it cannot reach it.
    func healthResponse() -> HTTPResponse {
        guard let shared else { return .json(.ok, Array(#"{"status":"ok"}"#.utf8)) }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMillis = Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
        // Before the first reading the store answered at start, when it opened.
        let reading = shared.lastHeadReading
        let fresh = reading.map { nowMillis - $0.atMillis <= Self.staleReadingMillis } ?? true
        let reachable = (reading?.reachable ?? true) && fresh
        var writer = MessageWriter()
        writer.string("status", reachable ? "ok" : "unavailable")
        writer.string("store", "postgres")
        writer.bool("storeReachable", reachable)
        writer.int("storeRoundTripMicros", reading?.roundTripMicros ?? 0)
        writer.int("storeHead", Int64(metrics.globalHead))
        writer.int("storeLag", Int64(metrics.storeLag))
        if !reachable {
            writer.string("error", reading?.error ?? "no reading of the store for \(Self.staleReadingMillis / 1000) s")
        }
        var response = HTTPResponse.json(reachable ? .ok : .serviceUnavailable, writer.finish())
        if !reachable { response.headers.set("Retry-After", String(REST.unavailableRetryAfterSeconds)) }
        return response
    }

    /// Keeps `tally_client_outbox_total` exact as clients report.
    func setOutbox(_ outbox: Int64, of session: Session) {
        metrics.clientOutboxTotal.add(Int(outbox - session.outbox), ordering: .relaxed)
        session.outbox = outbox
    }

    /// `tally_client_lag_max`, which needs every session: refreshed about
    /// once a second while commits move the head (lag changes only then, or
    /// falls when a client catches up).
    func updateClientGauges() {
        var lag: Int64 = 0
        for case let session? in sessions { lag = max(lag, headSeq - session.seenSeq) }
        metrics.clientLagMax.store(Int(lag), ordering: .relaxed)
    }

    /// `GET /v1/workflows`: the stage machines, so a client can order stages
    /// and check transitions (the offline mirror's merge rule).
    func workflowsReport() -> [UInt8] {
        var writer = MessageWriter()
        let flows: [JSONValue] = configuration.planner.workflows.workflows.map { flow in
            var object: JSONObject = [
                "prefix": .string(flow.prefix), "stageField": .string(flow.stageField),
                "stages": .array(flow.stages.map(JSONValue.string)),
                "transitions": .object(JSONObject(flow.transitions.map { ($0.key, JSONValue.array($0.value.map(JSONValue.string))) })),
                "terminal": .array(flow.terminal.sorted().map(JSONValue.string)),
            ]
            if let stats = flow.stats { object["stats"] = .string(stats) }
            if let list = flow.list { object["list"] = .string(list) }
            return .object(object)
        }
        writer.value("workflows", .array(flows))
        return writer.finish()
    }
}
