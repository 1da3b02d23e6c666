@preconcurrency import Glibc
import TallyConcurrency
import TallyPostgres

/// Hears of every group commit on a PostgreSQL store, from this hub or any
/// other, and reads the server's state once a second: the
/// `SharedStore.watchHead` of `PostgresStore`.
///
/// One thread with a connection of its own LISTENs on the writers'
/// channel. Each group that adds changes sends one notification whose
/// payload is its last seq, delivered at COMMIT, so a notification is the
/// new global head and costs no statement. Notifications are lost while
/// the connection is down, so after every (re)connect, and once a second
/// in any case, the watcher reads the head row itself, timed: that read is
/// the store's round trip and reachability that `/healthz` and `/metrics`
/// report. A lost connection is reported as a failed reading at once and
/// tried again every `HeadReading.intervalMillis`.
final class PostgresHeadWatcher: Sendable {
    private let url: String
    /// The head of this hub's own last commit: a notification at or below
    /// it is this hub's own group (or one it followed), no news.
    private let ownCommits: LockedValueBox<Int64>
    private let waker: PostgresWaker
    private let stopping = LockedValueBox(false)
    private let thread = LockedValueBox<pthread_t?>(nil)
    let latest = LockedValueBox<HeadReading?>(nil)

    init(url: String, ownCommits: LockedValueBox<Int64>) throws(StoreError) {
        self.url = url
        self.ownCommits = ownCommits
        do throws(PostgresError) {
            waker = try PostgresWaker()
        } catch {
            throw StoreError(error)
        }
    }

    /// Starts the thread; `onReading` runs on it with every reading. Later
    /// calls do nothing.
    func start(_ onReading: @escaping @Sendable (HeadReading) -> Void) {
        thread.withLock { thread in
            guard thread == nil, !stopping.withLock({ $0 }) else { return }
            thread = try? StoreThread.spawn(name: "head watcher") { [self] in run(onReading) }
        }
    }

    /// Ends the thread and waits for it. Idempotent.
    func stop() {
        stopping.withLock { $0 = true }
        waker.wake()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        if let running { StoreThread.join(running) }
    }

    private var isStopping: Bool { stopping.withLock { $0 } }

    private func run(_ onReading: @Sendable (HeadReading) -> Void) {
        var connection: PostgresConnection?
        // When the head was last read with a statement; nil: read it now.
        var lastRead: Int64?
        var head: Int64 = 0
        func report(_ reading: HeadReading) {
            latest.withLock { $0 = reading }
            onReading(reading)
        }
        while !isStopping {
            do throws(PostgresError) {
                if connection == nil {
                    connection = try PostgresConnection(url: url, options: PostgresStore.connectionOptions(role: "watcher"))
                    try connection?.listen(PostgresWriter.channel)
                    lastRead = nil
                } else if connection?.isConnected == false {
                    try connection?.reconnect()
                    lastRead = nil
                }
                guard let live = connection else { continue }
                let now = PostgresConnection.monotonicMillis()
                if lastRead.map({ now - $0 >= HeadReading.intervalMillis }) ?? true {
                    lastRead = now
                    let started = Self.monotonicMicros()
                    head = try live.execute(PostgresWriter.Statements.readHead).firstRow().int64(0)
                    report(HeadReading(head: head, roundTripMicros: Self.monotonicMicros() - started, error: nil,
                                       atMillis: PostgresConnection.monotonicMillis()))
                }
                let wait = max(1, Int((lastRead ?? now) + HeadReading.intervalMillis - PostgresConnection.monotonicMillis()))
                switch try live.waitForNotifications(timeoutMillis: wait, waker: waker) {
                case .woken, .timedOut:
                    continue
                case .notifications(let received):
                    let announced = received.compactMap { Int64($0.payload) }.max() ?? head
                    guard announced > head else { continue }
                    head = announced
                    // The hub's own commits: told already, by its writer
                    // (one wake-up of its core per commit saved).
                    guard announced > ownCommits.withLock({ $0 }) else { continue }
                    let previous = latest.withLock { $0 }
                    report(HeadReading(head: head, roundTripMicros: previous?.roundTripMicros ?? 0, error: nil,
                                       atMillis: PostgresConnection.monotonicMillis()))
                }
            } catch {
                // Every failed attempt is the latest reading; the callback
                // hears of a failure only when it is new or says something else.
                let reading = HeadReading(head: nil, roundTripMicros: 0, error: StoreError(error).description,
                                          atMillis: PostgresConnection.monotonicMillis())
                let previous = latest.withLock { latest in
                    defer { latest = reading }
                    return latest
                }
                if previous?.reachable != false || previous?.error != reading.error { onReading(reading) }
                if !isStopping { _ = waker.wait(timeoutMillis: Int(HeadReading.intervalMillis)) }
            }
        }
        connection?.close()
    }

    static func monotonicMicros() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1_000
    }
}
