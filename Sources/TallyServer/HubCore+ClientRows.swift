/// The sessions' sync health as values, handed out of the core
/// (`Input.clientRows`): `GET /v1/admin/clients` builds its answer from
/// them, and a hub on PostgreSQL publishes them for the other hubs
/// (`ClientHealthPublisher`) — neither holds the core longer than this one
/// pass over the session slots.
extension HubCore {
    /// Core thread only.
    func clientRows() -> ClientRows {
        let now = configuration.clock()
        var rows: [ClientRow] = []
        rows.reserveCapacity(metrics.sessions.load(ordering: .relaxed))
        for case let session? in sessions {
            rows.append(ClientRow(session: Int64(session.id), client: session.client, user: session.actor?.user,
                                  connectedMs: now - session.connectedAt, seq: session.seenSeq, outbox: session.outbox,
                                  lastAckMs: now - session.lastHeardAt))
        }
        return ClientRows(head: headSeq, rows: rows)
    }
}
