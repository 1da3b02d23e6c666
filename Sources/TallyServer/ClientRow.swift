import TallyProtocol

/// One connection's sync health, as `GET /v1/admin/clients` lists it: who
/// it is, how long it has been connected, the highest seq it was sent or
/// said it applied, its outbox as it last reported and how long since the
/// hub last heard from it.
///
/// Times are durations, not instants: a row another hub published is read
/// on a machine whose clock may differ, so the reader adds the row's age
/// (`aged(by:)`) rather than comparing two clocks. The lag is left out of
/// what a hub publishes: the reader works it out from the head it knows.
struct ClientRow: Sendable, Equatable {
    var session: Int64
    var client: String?
    var user: String?
    var connectedMs: Int64
    var seq: Int64
    var outbox: Int64
    var lastAckMs: Int64

    /// The row of the report: its members, `lag` behind `head`, and `hub`,
    /// the name of the hub the client is connected to.
    func reportJSON(head: Int64, hub: String) -> [UInt8] {
        var writer = MessageWriter()
        write(to: &writer)
        writer.int("lag", max(0, head - seq))
        writer.int("outbox", outbox)
        writer.int("lastAckMs", lastAckMs)
        writer.string("hub", hub)
        return writer.finish()
    }

    /// What a hub publishes for the others (`tally_clients.row`).
    func publishedJSON() -> String {
        var writer = MessageWriter()
        write(to: &writer)
        writer.int("outbox", outbox)
        writer.int("lastAckMs", lastAckMs)
        return String(decoding: writer.finish(), as: UTF8.self)
    }

    /// The members both forms share, in the report's order.
    private func write(to writer: inout MessageWriter) {
        writer.int("session", session)
        if let client { writer.string("client", client) } else { writer.null("client") }
        if let user { writer.string("user", user) } else { writer.null("user") }
        writer.int("connectedMs", connectedMs)
        writer.int("seq", seq)
    }

    init(session: Int64, client: String?, user: String?, connectedMs: Int64, seq: Int64, outbox: Int64, lastAckMs: Int64) {
        self.session = session
        self.client = client
        self.user = user
        self.connectedMs = connectedMs
        self.seq = seq
        self.outbox = outbox
        self.lastAckMs = lastAckMs
    }

    /// Reads back what `publishedJSON` wrote (another hub's row, which
    /// PostgreSQL's jsonb may have reordered); nil if it is not such a row,
    /// written by a build that disagrees, say.
    init?(published json: [UInt8]) {
        guard case .object(let object)? = try? JSONValue.parse(json) else { return nil }
        func int(_ key: String) -> Int64? {
            guard case .number(let number)? = object[key] else { return nil }
            return number.int64Value
        }
        guard let session = int("session"), let connectedMs = int("connectedMs"), let seq = int("seq"),
              let outbox = int("outbox"), let lastAckMs = int("lastAckMs") else { return nil }
        self.init(session: session, client: object["client"]?.stringValue, user: object["user"]?.stringValue,
                  connectedMs: connectedMs, seq: seq, outbox: outbox, lastAckMs: lastAckMs)
    }

    /// The row `millis` later: connected and silent for that much longer.
    func aged(by millis: Int64) -> ClientRow {
        var row = self
        row.connectedMs += millis
        row.lastAckMs += millis
        return row
    }
}

/// What the core hands over: its head and a row per connected session.
struct ClientRows: Sendable {
    var head: Int64
    var rows: [ClientRow]
}
