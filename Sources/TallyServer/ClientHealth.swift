@preconcurrency import Glibc
import TallyConcurrency
import TallyProtocol

/// What `GET /v1/admin/clients` combines: this hub's name, its own
/// sessions' rows (asked of the core per request) and, on a hub sharing
/// PostgreSQL, the other hubs' rows as its `ClientHealthPublisher` last read
/// them.
///
/// The other hubs' rows wait here, under a lock, so that the report never
/// waits for the database: the core's part of a request is one pass over
/// its sessions, whatever the database does. A row counts while it is
/// fresh: published within `freshMillis` of now, counting both its age when
/// read and the time since (on this machine's monotonic clock), so a hub
/// that stopped publishing — killed, or cut off from the database — drops
/// out of the report within that time even if this hub cannot read anymore.
final class ClientHealth: Sendable {
    /// Other hubs' rows as one publish read them.
    struct Remote: Sendable {
        struct Row: Sendable {
            var hub: String
            var row: ClientRow
            /// How old the row was when read.
            var ageMillis: Int64
        }

        /// The database's head when read: the other rows' lag is behind it.
        var head: Int64
        var rows: [Row]
        /// When they were read (`ClientHealth.monotonicMillis`).
        var readAt: Int64
    }

    private let name = LockedValueBox("")
    private let remote = LockedValueBox<Remote?>(nil)
    let freshMillis: Int64
    private let clock: @Sendable () -> Int64

    /// - Parameter clock: monotonic milliseconds (tests move their own).
    init(freshMillis: Int64, clock: @escaping @Sendable () -> Int64 = ClientHealth.monotonicMillis) {
        self.freshMillis = freshMillis
        self.clock = clock
    }

    /// This hub's name: known once it listens (the default has its port).
    var hubName: String {
        get { name.withLock { $0 } }
        set { name.withLock { $0 = newValue } }
    }

    /// Keeps what a publish read; stamped with the time now.
    func received(head: Int64, rows: [Remote.Row]) {
        let now = clock()
        remote.withLock { $0 = Remote(head: head, rows: rows, readAt: now) }
    }

    /// The report: `{"head":H,"clients":[…]}`, this hub's sessions first
    /// (lag behind its own head), then the other hubs' fresh rows by hub
    /// and session (lag behind the database's head, or this hub's if that
    /// is further on), each row naming its hub.
    func report(local: ClientRows) -> [UInt8] {
        let hub = hubName
        var rows = local.rows.map { $0.reportJSON(head: local.head, hub: hub) }
        if let remote = remote.withLock({ $0 }) {
            let since = max(0, clock() - remote.readAt)
            let head = max(local.head, remote.head)
            for other in remote.rows where other.ageMillis + since <= freshMillis {
                rows.append(other.row.aged(by: other.ageMillis + since).reportJSON(head: head, hub: other.hub))
            }
        }
        var writer = MessageWriter()
        writer.int("head", local.head)
        writer.rawArray("clients", rows)
        return writer.finish()
    }

    /// CLOCK_MONOTONIC in milliseconds: it does not jump with the wall clock.
    static let monotonicMillis: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}
