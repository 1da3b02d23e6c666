@preconcurrency import Glibc
import CLibPQ

/// A NOTIFY received on a channel this connection listens on.
package struct PostgresNotification: Sendable, Equatable {
    package var channel: String
    package var payload: String
    /// The server process of the session that sent it (compare with
    /// `PostgresConnection.backendPID` to skip one's own).
    package var senderPID: Int32

    package init(channel: String, payload: String, senderPID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderPID = senderPID
    }
}

/// How a wait for notifications ended.
package enum PostgresWait: Sendable, Equatable {
    /// One or more notifications, in the order the server sent them.
    case notifications([PostgresNotification])
    /// The timeout passed with nothing received.
    case timedOut
    /// A `PostgresWaker` was woken.
    case woken
}

// LISTEN/NOTIFY ("NOTIFY" in the SQL command reference; "Asynchronous
// Notification" in the libpq manual). A notification sent inside a
// transaction is delivered when, and only if, the transaction commits, and
// "if the same channel name is signaled multiple times with identical
// payload strings within the same transaction, only one instance of the
// notification event is delivered". Delivery is lossless while the
// listener stays connected; across a reconnect it is not, which is why a
// listener reads the change log after its last seq instead of trusting
// payloads alone.
extension PostgresConnection {
    /// The longest channel name: identifiers are cut to NAMEDATALEN - 1
    /// bytes, and LISTEN would listen on the cut name.
    package static let maximumChannelLength = 63

    /// LISTEN on `channel`; kept across `reconnect()`.
    package func listen(_ channel: String) throws(PostgresError) {
        try Self.checkChannel(channel, operation: "listen")
        try execute(script: "LISTEN \(Self.quoted(channel))")
        channels.insert(channel)
    }

    package func unlisten(_ channel: String) throws(PostgresError) {
        try Self.checkChannel(channel, operation: "unlisten")
        try execute(script: "UNLISTEN \(Self.quoted(channel))")
        channels.remove(channel)
    }

    /// Sends a notification (pg_notify, parameterised). Inside `transaction`
    /// it is delivered at COMMIT and dropped by ROLLBACK. The payload must
    /// be shorter than 8000 bytes.
    package func notify(_ channel: String, payload: String = "") throws(PostgresError) {
        try Self.checkChannel(channel, operation: "notify")
        try execute(Self.notifyStatement, [.text(channel), .text(payload)])
    }

    private static let notifyStatement = PostgresStatement("notify", "SELECT pg_notify($1, $2)",
                                                           parameters: [.text, .text])

    /// The notifications already received, without waiting: reads what the
    /// socket holds (PQconsumeInput), then takes each one (PQnotifies).
    package func takeNotifications() throws(PostgresError) -> [PostgresNotification] {
        guard !isClosed else { throw .usage("the connection is closed", operation: "read notifications") }
        guard PQconsumeInput(handle) == 1 else { throw lostWhileWaiting() }
        return drainNotifications()
    }

    /// Waits until a notification arrives, `timeoutMillis` pass, or `waker`
    /// is woken. Notifications received earlier (also during statements)
    /// are returned at once.
    ///
    /// The wait is poll(2) on PQsocket and the waker's eventfd; when the
    /// socket is readable, PQconsumeInput reads it and PQnotifies takes the
    /// notifications ("Asynchronous Notification": "check PQnotifies after
    /// each PQconsumeInput"). A socket that wakes the poll with something
    /// else (a notice, a partial message) goes back to waiting for the rest
    /// of the timeout. A broken connection throws `.connection`.
    package func waitForNotifications(timeoutMillis: Int, waker: PostgresWaker? = nil) throws(PostgresError) -> PostgresWait {
        let pending = try takeNotifications()
        if !pending.isEmpty { return .notifications(pending) }
        let socket = PQsocket(handle)
        guard socket >= 0 else { throw lostWhileWaiting() }
        let deadline = Self.monotonicMillis() + Int64(max(timeoutMillis, 0))
        while true {
            var descriptors = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
            if let waker { descriptors.append(pollfd(fd: waker.descriptor, events: Int16(POLLIN), revents: 0)) }
            let remaining = max(deadline - Self.monotonicMillis(), 0)
            let ready = poll(&descriptors, nfds_t(descriptors.count), Int32(min(remaining, Int64(Int32.max))))
            if ready < 0 {
                guard errno == EINTR else {
                    throw PostgresError(kind: .connection, message: "poll failed: \(String(cString: strerror(errno)))",
                                        operation: "wait for notifications", server: url.description)
                }
                continue
            }
            if descriptors.count > 1, descriptors[1].revents != 0 {
                waker?.drain()
                return .woken
            }
            if descriptors[0].revents != 0 {
                // POLLIN, or POLLHUP/POLLERR: PQconsumeInput then fails and says why.
                let received = try takeNotifications()
                if !received.isEmpty { return .notifications(received) }
            }
            if remaining == 0 || Self.monotonicMillis() >= deadline { return .timedOut }
        }
    }

    private func drainNotifications() -> [PostgresNotification] {
        var received: [PostgresNotification] = []
        while let notify = PQnotifies(handle) {
            received.append(PostgresNotification(channel: String(cString: notify.pointee.relname),
                                                 payload: String(cString: notify.pointee.extra),
                                                 senderPID: notify.pointee.be_pid))
            // "It is sufficient to free the PGnotify pointer; the relname and
            // extra fields do not represent separate allocations."
            PQfreemem(notify)
        }
        return received
    }

    private func lostWhileWaiting() -> PostgresError {
        var error = PostgresError(kind: .connection, message: Self.tidy(PQerrorMessage(handle)),
                                  operation: "wait for notifications", server: url.description)
        if error.message.isEmpty { error.message = "the connection is gone" }
        if let notice = lastNotice, notice.severity == "FATAL" || notice.severity == "PANIC" {
            error.detail = "the server said: \(notice.message)" + (notice.sqlState.map { " (SQLSTATE \($0))" } ?? "")
            error.sqlState = notice.sqlState
        }
        return error
    }

    private static func checkChannel(_ channel: String, operation: String) throws(PostgresError) {
        guard !channel.isEmpty, channel.utf8.count <= maximumChannelLength, !channel.utf8.contains(0) else {
            throw .usage("a channel name is 1 to \(maximumChannelLength) bytes without NUL", operation: operation)
        }
    }

    package static func monotonicMillis() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}
