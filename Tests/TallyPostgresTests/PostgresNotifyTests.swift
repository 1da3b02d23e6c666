@preconcurrency import Glibc
import TallyConcurrency
import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// LISTEN/NOTIFY between two connections, and the wait: notifications,
    /// a timeout, a wake-up from another thread.
    @Suite struct Notify {
        @Test func aNotificationArrivesWithItsPayloadAndSender() throws {
            let url = try freshDatabase("notify")
            let listener = try PostgresConnection(url: url)
            let sender = try PostgresConnection(url: url)
            try listener.listen("changes")
            #expect(listener.channels == ["changes"])
            try sender.notify("changes", payload: "1-3 ☃")
            let received = try listener.waitForNotifications(timeoutMillis: 5_000)
            #expect(received == .notifications([PostgresNotification(channel: "changes", payload: "1-3 ☃",
                                                                     senderPID: sender.backendPID)]))
            #expect(sender.backendPID != listener.backendPID)
            // Taken once.
            #expect(try listener.takeNotifications().isEmpty)
        }

        @Test func oneNotifyPerTransactionArrivesOnceAfterCommit() throws {
            let url = try freshDatabase("notify_tx")
            let listener = try PostgresConnection(url: url)
            let sender = try PostgresConnection(url: url)
            try sender.execute(script: "CREATE TABLE log (seq int8 PRIMARY KEY)")
            try listener.listen("changes")
            try sender.transaction {
                try sender.query("INSERT INTO log VALUES (1), (2)")
                try sender.notify("changes", payload: "1-2")
                // Not delivered before the commit.
                #expect(try listener.waitForNotifications(timeoutMillis: 200) == .timedOut)
            }
            let received = try listener.waitForNotifications(timeoutMillis: 5_000)
            guard case .notifications(let notifications) = received else {
                Issue.record("got \(received)")
                return
            }
            #expect(notifications.map(\.payload) == ["1-2"])
            // After the notification, the rows it announces are visible.
            #expect(try listener.query("SELECT count(*) FROM log").firstRow().int64(0) == 2)
            // Once: nothing more comes.
            #expect(try listener.waitForNotifications(timeoutMillis: 200) == .timedOut)
        }

        @Test func aRolledBackTransactionNotifiesNobody() throws {
            let url = try freshDatabase("notify_rollback")
            let listener = try PostgresConnection(url: url)
            let sender = try PostgresConnection(url: url)
            try listener.listen("changes")
            struct Refused: Error {}
            #expect(throws: Refused.self) {
                try sender.transaction {
                    try sender.notify("changes", payload: "never")
                    throw Refused()
                }
            }
            try sender.notify("changes", payload: "after")
            let received = try listener.waitForNotifications(timeoutMillis: 5_000)
            #expect(received == .notifications([PostgresNotification(channel: "changes", payload: "after",
                                                                     senderPID: sender.backendPID)]))
        }

        @Test func theWaitTimesOutCleanlyWithNothingPending() throws {
            let listener = try freshConnection("notify_timeout")
            try listener.listen("changes")
            let started = monotonicMillis()
            #expect(try listener.waitForNotifications(timeoutMillis: 300) == .timedOut)
            let elapsed = monotonicMillis() - started
            #expect(elapsed >= 290 && elapsed < 5_000, "waited \(elapsed) ms")
            #expect(try listener.waitForNotifications(timeoutMillis: 0) == .timedOut)
            // The connection is fine afterwards.
            #expect(try listener.query("SELECT 1").firstRow().int64(0) == 1)
        }

        @Test func aWakerEndsTheWaitFromAnotherThread() throws {
            let url = try freshDatabase("notify_wake")
            let waker = try PostgresWaker()
            let outcome = LockedValueBox<(PostgresWait?, Int64)>((nil, 0))
            let listening = CountdownLatch(count: 1)
            onThreads(2) { index in
                if index == 0 {
                    do {
                        let listener = try PostgresConnection(url: url)
                        try listener.listen("changes")
                        listening.countDown()
                        let started = monotonicMillis()
                        let result = try listener.waitForNotifications(timeoutMillis: 30_000, waker: waker)
                        outcome.withLock { $0 = (result, monotonicMillis() - started) }
                    } catch {
                        listening.countDown()
                        Issue.record("listener: \(error)")
                    }
                } else {
                    listening.wait()
                    usleep(100_000)
                    waker.wake()
                }
            }
            let (result, elapsed) = outcome.withLock { $0 }
            #expect(result == .woken)
            #expect(elapsed < 10_000, "woken after \(elapsed) ms")
        }

        @Test func notificationsReceivedDuringAStatementAreKept() throws {
            let url = try freshDatabase("notify_during")
            let listener = try PostgresConnection(url: url)
            let sender = try PostgresConnection(url: url)
            try listener.listen("a")
            try listener.listen("B \"quoted\"")
            try sender.notify("a", payload: "1")
            try sender.notify("B \"quoted\"", payload: "2")
            usleep(100_000)
            // The statement reads the notifications off the socket with its answer.
            #expect(try listener.query("SELECT pg_sleep(0.05)").count == 1)
            var payloads: [String] = []
            let deadline = monotonicMillis() + 5_000
            while payloads.count < 2, monotonicMillis() < deadline {
                if case .notifications(let received) = try listener.waitForNotifications(timeoutMillis: 1_000) {
                    payloads += received.map { "\($0.channel)=\($0.payload)" }
                }
            }
            #expect(payloads == ["a=1", "B \"quoted\"=2"])
            try listener.unlisten("a")
            try sender.notify("a", payload: "3")
            #expect(try listener.waitForNotifications(timeoutMillis: 200) == .timedOut)
        }

        @Test func aBadChannelNameIsRefused() throws {
            let db = try freshConnection("notify_names")
            let long = String(repeating: "x", count: PostgresConnection.maximumChannelLength + 1)
            #expect(postgresError { try db.listen(long) }?.kind == .usage)
            #expect(postgresError { try db.notify("") }?.kind == .usage)
            #expect(postgresError { try db.notify("changes", payload: String(repeating: "p", count: 8_000)) }?.kind == .server)
        }
    }
}
