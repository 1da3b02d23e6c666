import TallyPostgres

/// Clients' sync health of every hub on a shared PostgreSQL database
/// (`tally_clients`, schema 5): each hub publishes one row per session of
/// its own about once a second and reads the other hubs' rows back, so
/// `GET /v1/admin/clients` on any hub lists the clients of all of them.
///
/// A row is `(hub, session, row, seen)`: the hub's name, its session id,
/// the health figures as JSON (`jsonb`: an operator can read them with
/// `row->>'client'`; the table does not look inside) and when the hub last
/// published it, on the database's clock. Readers take only rows seen in
/// the last few seconds, so a hub that died without a word (SIGKILL, a lost
/// machine) drops out by itself; any hub deletes rows much older than that.
/// Times in a row are durations ("connected 40 s ago"), never instants, and
/// the reader adds the row's age, so the hubs' clocks need not agree.
///
/// Not Sendable: one owner thread, the hub's publisher, like the
/// `PostgresConnection` inside it.
public final class PostgresClientTable {
    /// A row of another hub, as read.
    public struct Row: Sendable, Equatable {
        public var hub: String
        public var session: Int64
        /// The JSON the hub published.
        public var json: [UInt8]
        /// How long before the read the hub published it (the database's clock).
        public var ageMillis: Int64

        public init(hub: String, session: Int64, json: [UInt8], ageMillis: Int64) {
            self.hub = hub
            self.session = session
            self.json = json
            self.ageMillis = ageMillis
        }
    }

    /// What one publish read back.
    public struct Snapshot: Sendable, Equatable {
        /// The database's head (`tally_head`): every hub's changes counted.
        public var head: Int64
        /// The other hubs' rows seen within the freshness window, by hub and session.
        public var others: [Row]
    }

    private let connection: PostgresConnection

    /// Connects (the hub's store has brought the schema up to date).
    public init(url: String) throws(SharedTableError) {
        var options = PostgresConnection.Options()
        options.applicationName = "tally-hub-clients"
        do throws(PostgresError) {
            connection = try PostgresConnection(url: url, options: options)
        } catch {
            throw SharedTableError(error, doing: "connect for the clients table")
        }
    }

    deinit {
        connection.close()
    }

    /// In one statement (one round trip, one snapshot): replaces `hub`'s
    /// rows by `rows` (sessions gone since the last publish are deleted),
    /// deletes every row older than `keepMillis`, and reads the database's
    /// head and the other hubs' rows seen within `freshMillis`. Retried once
    /// on a new session when the session was lost; the statement is
    /// idempotent.
    ///
    /// - Parameter rows: session id and its JSON, one per session of `hub`.
    public func publish(hub: String, rows: [(session: Int64, json: String)], freshMillis: Int64,
                        keepMillis: Int64) throws(SharedTableError) -> Snapshot {
        let parameters: [PostgresValue] = [.text(hub), .int8Array(rows.map(\.session)), .textArray(rows.map(\.json)),
                                           .int8(freshMillis), .int8(keepMillis)]
        return try run("publish client rows") { connection throws(PostgresError) in
            let result = try connection.execute(Self.publish, parameters)
            var snapshot = Snapshot(head: try result.firstRow().int64(0), others: [])
            for row in result where !row.isNull(1) {
                snapshot.others.append(Row(hub: try row.text(1), session: try row.int64(2),
                                           json: Array(try row.text(3).utf8), ageMillis: max(0, try row.int64(4))))
            }
            return snapshot
        }
    }

    /// Deletes `hub`'s rows: a hub that stops says its clients are gone
    /// at once instead of letting them expire.
    public func withdraw(hub: String) throws(SharedTableError) {
        _ = try run("withdraw client rows") { connection throws(PostgresError) in
            try connection.execute(Self.withdraw, [.text(hub)])
        }
    }

    private func run<R>(_ operation: String,
                        _ body: (PostgresConnection) throws(PostgresError) -> R) throws(SharedTableError) -> R {
        do throws(PostgresError) {
            return try connection.retryingLostSession(body)
        } catch {
            throw SharedTableError(error, doing: operation)
        }
    }

    // The data-modifying CTEs and the final SELECT share one snapshot, so
    // the SELECT sees the other hubs' rows as they were before this
    // statement (it changes only this hub's rows and expired ones, and
    // reads neither). The LEFT JOIN keeps one row, with the head, when no
    // other hub has any.
    static let publish = PostgresStatement("publish client rows", """
        WITH mine AS (
            SELECT * FROM unnest($2::int8[], $3::text[]) AS m(session, row)
        ), upserted AS (
            INSERT INTO tally_clients(hub, session, row, seen)
            SELECT $1, session, row::jsonb, now() FROM mine
            ON CONFLICT (hub, session) DO UPDATE SET row = EXCLUDED.row, seen = EXCLUDED.seen
        ), removed AS (
            DELETE FROM tally_clients
            WHERE (hub = $1 AND session <> ALL($2::int8[])) OR seen < now() - $5::float8 * interval '1 millisecond'
        )
        SELECT h.seq, c.hub, c.session, c.row::text, (extract(epoch FROM now() - c.seen) * 1000)::int8
        FROM tally_head h
        LEFT JOIN tally_clients c ON c.hub <> $1 AND c.seen >= now() - $4::float8 * interval '1 millisecond'
        ORDER BY c.hub, c.session
        """, parameters: [.text, .int8Array, .textArray, .int8, .int8])

    static let withdraw = PostgresStatement("withdraw client rows", "DELETE FROM tally_clients WHERE hub = $1",
                                            parameters: [.text])
}
