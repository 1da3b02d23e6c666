import TallyEngine
import TallyHTTP
import TallyProtocol

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

    /// `GET /v1/admin/clients`.
    func clientsReport() -> [UInt8] {
        let now = configuration.clock()
        var writer = MessageWriter()
        writer.int("head", headSeq)
        var rows: [[UInt8]] = []
        for case let session? in sessions {
            var row = MessageWriter()
            row.int("session", Int64(session.id))
            if let client = session.client { row.string("client", client) } else { row.null("client") }
            if let actor = session.actor { row.string("user", actor.user) } else { row.null("user") }
            row.int("connectedMs", now - session.connectedAt)
            row.int("seq", session.seenSeq)
            row.int("lag", max(0, headSeq - session.seenSeq))
            row.int("outbox", session.outbox)
            row.int("lastAckMs", now - session.lastHeardAt)
            rows.append(row.finish())
        }
        writer.rawArray("clients", rows)
        return writer.finish()
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
