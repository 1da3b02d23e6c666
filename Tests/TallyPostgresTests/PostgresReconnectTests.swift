import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// The server goes away and comes back: statements and waits report
    /// `isConnectionLost`, `reconnect()` fails clearly while the server is
    /// down and works once it is up, LISTENs and prepared statements come
    /// back by themselves, and a listener catches up from the log.
    @Suite struct Reconnect {
        static let insert = PostgresStatement("insert change", "INSERT INTO log VALUES ($1)", parameters: [.int8])
        static let after = PostgresStatement("changes after", "SELECT seq FROM log WHERE seq > $1 ORDER BY seq",
                                             parameters: [.int8])

        private func write(_ writer: PostgresConnection, _ seq: Int64) throws {
            try writer.transaction {
                try writer.execute(Self.insert, [.int8(seq)])
                try writer.notify("changes", payload: String(seq))
            }
        }

        private func read(_ reader: PostgresConnection, after seq: Int64) throws -> [Int64] {
            try reader.execute(Self.after, [.int8(seq)]).map { try $0.int64(0) }
        }

        @Test func aRestartIsConnectionLostThenReconnectAndCatchUpWork() throws {
            let cluster = try PostgresCluster.shared()
            let url = try cluster.createDatabase("restart")
            let writer = try PostgresConnection(url: url)
            let listener = try PostgresConnection(url: url)
            try writer.execute(script: "CREATE TABLE log (seq int8 PRIMARY KEY)")
            try listener.listen("changes")
            try write(writer, 1)
            #expect(try listener.waitForNotifications(timeoutMillis: 5_000)
                    == .notifications([PostgresNotification(channel: "changes", payload: "1", senderPID: writer.backendPID)]))
            #expect(try read(listener, after: 0) == [1])

            try cluster.restart()

            // The writer finds out at its next statement.
            let lost = postgresError { try write(writer, 2) }
            #expect(lost?.isConnectionLost == true, "\(String(describing: lost))")
            #expect(lost?.commitOutcomeUnknown == false)
            #expect(!writer.isConnected)
            // The idle listener finds out in its wait, with the server's reason.
            let listenerLost = postgresError { _ = try listener.waitForNotifications(timeoutMillis: 5_000) }
            #expect(listenerLost?.isConnectionLost == true, "\(String(describing: listenerLost))")
            #expect(listenerLost?.description.contains("terminating connection due to administrator command") == true,
                    "\(String(describing: listenerLost))")

            try writer.reconnect()
            #expect(writer.isConnected)
            // Prepared again on this session without being asked; the NOTIFY goes nowhere (nobody listens).
            try write(writer, 2)

            try listener.reconnect()
            #expect(listener.channels == ["changes"])
            // Catch-up: the log after the last seq seen, not the notifications.
            #expect(try read(listener, after: 1) == [2])
            // LISTEN was repeated by reconnect.
            try write(writer, 3)
            #expect(try listener.waitForNotifications(timeoutMillis: 5_000)
                    == .notifications([PostgresNotification(channel: "changes", payload: "3", senderPID: writer.backendPID)]))
            #expect(try read(listener, after: 2) == [3])
        }

        @Test func whileTheServerIsDownWritesAndReconnectsFailClearly() throws {
            let cluster = try PostgresCluster.shared()
            let url = try cluster.createDatabase("outage")
            let writer = try PostgresConnection(url: url)
            try writer.execute(script: "CREATE TABLE log (seq int8 PRIMARY KEY)")
            try write(writer, 1)

            try cluster.stop()
            var restarted = false
            defer { if !restarted { try? cluster.start() } }

            let lost = postgresError { try write(writer, 2) }
            #expect(lost?.isConnectionLost == true, "\(String(describing: lost))")
            let refused = postgresError { try writer.reconnect() }
            #expect(refused?.kind == .connection)
            #expect(refused?.isConnectionLost == true)
            #expect(refused?.description.contains("port \(cluster.port) failed") == true, "\(String(describing: refused))")
            #expect(refused?.operation.hasPrefix("reconnect to postgres://tally@127.0.0.1:\(cluster.port)/") == true)
            // Still refused, still clear, on a second try.
            #expect(postgresError { try writer.reconnect() }?.isConnectionLost == true)

            try cluster.start()
            restarted = true
            try writer.reconnect()
            try write(writer, 2)
            #expect(try read(writer, after: 0) == [1, 2])
        }
    }
}
