@preconcurrency import Glibc
import TallyConcurrency
import TallyNet
import TallyStore

/// A hub on a shared PostgreSQL database publishes its clients' sync health
/// for the other hubs, and reads theirs, about once a second, on a thread
/// of its own with a connection of its own (`PostgresClientTable`).
///
/// Each round asks the core for its rows (`HubCore.Input.clientRows`, one
/// pass over the sessions; at most one request is outstanding, so a busy
/// core is never asked twice), then in one statement replaces this hub's
/// rows in `tally_clients`, deletes rows long expired, and reads the other
/// hubs' fresh rows and the database's head, which it leaves in
/// `ClientHealth` for the report. Neither the core nor a request ever
/// waits for the database.
///
/// A database that cannot be reached costs a warning (at most one per
/// `quietMillis`) and the round; the next round tries again on a new
/// session. Stopping deletes this hub's rows, so its clients leave the
/// other hubs' reports at once; a hub that dies without stopping leaves
/// rows that the others stop counting `freshMillis` after they were last
/// published, and that some hub deletes after `keepMillis`.
final class ClientHealthPublisher: Sendable {
    struct Timing: Sendable {
        /// Between two publishes.
        var intervalMillis: Int64 = 1_000
        /// Rows older than this are not counted (a few publishes missed).
        var freshMillis: Int64 = 5_000
        /// Rows older than this are deleted by whichever hub publishes.
        var keepMillis: Int64 = 60_000
        /// Longest wait for the core's rows in one round.
        var coreWaitMillis: Int64 = 2_000
        /// Failures are logged at most once in this long.
        var quietMillis: Int64 = 30_000
    }

    private struct Control: Sendable {
        var stopping = false
        /// A request for rows is with the core.
        var asked = false
        /// The core's answer, until a round takes it.
        var answer: ClientRows?
    }

    private enum Wait {
        case rows(ClientRows)
        /// The core did not answer within `coreWaitMillis`.
        case late
        case stopping
    }

    private let url: String
    private let core: HubCore
    private let health: ClientHealth
    private let logger: Logger
    private let timing: Timing
    private let control = ConditionLock(Control())
    /// The thread, while it runs (joined by `stop`).
    private let thread = LockedValueBox<pthread_t?>(nil)

    init(url: String, core: HubCore, health: ClientHealth, logger: Logger, timing: Timing) {
        self.url = url
        self.core = core
        self.health = health
        self.logger = logger
        self.timing = timing
    }

    /// Starts the thread; its first round is one interval from now.
    func start() {
        do throws(StoreError) {
            let started = try StoreThread.spawn(name: "clients publisher") { [self] in run() }
            thread.withLock { $0 = started }
        } catch {
            logger.error("clients.publisher_failed", ["error": error.description])
        }
    }

    /// Stops the thread after its current statement and its withdrawal of
    /// this hub's rows; returns once it is done.
    func stop() {
        control.withLock { $0.stopping = true }
        control.broadcast()
        if let running = thread.withLock({ $0.take() }) { StoreThread.join(running) }
    }

    private func run() {
        var table: PostgresClientTable?
        var lastWarning: Int64?
        rounds: while true {
            let stopping = control.wait(timeoutMillis: Int(timing.intervalMillis)) { $0.stopping ? true : nil } ?? false
            if stopping { break }
            let rows: ClientRows
            switch rowsFromCore() {
            case .rows(let answer): rows = answer
            // Publish nothing this round rather than an empty list, which
            // would withdraw every client; the answer is taken next round.
            case .late: continue rounds
            case .stopping: break rounds
            }
            do throws(SharedTableError) {
                let open: PostgresClientTable
                if let table { open = table } else { open = try PostgresClientTable(url: url) }
                table = open
                try publish(rows, on: open)
                if lastWarning != nil {
                    lastWarning = nil
                    logger.info("clients.publish_recovered")
                }
            } catch {
                let now = ClientHealth.monotonicMillis()
                if lastWarning.map({ now - $0 >= timing.quietMillis }) ?? true {
                    lastWarning = now
                    logger.warning("clients.publish_failed", ["error": error.description])
                }
            }
        }
        // Best effort: rows not withdrawn expire.
        try? table?.withdraw(hub: health.hubName)
    }

    /// The core's rows, asked for unless a request is still with it.
    private func rowsFromCore() -> Wait {
        let ask = control.withLock { control -> Bool in
            guard !control.asked, control.answer == nil else { return false }
            control.asked = true
            return true
        }
        if ask {
            let control = control
            core.post(.clientRows { rows in
                control.withLock { $0.answer = rows; $0.asked = false }
                control.broadcast()
            })
        }
        return control.wait(timeoutMillis: Int(timing.coreWaitMillis)) { control -> Wait? in
            if control.stopping { return .stopping }
            guard let rows = control.answer else { return nil }
            control.answer = nil
            return .rows(rows)
        } ?? .late
    }

    private func publish(_ rows: ClientRows, on table: PostgresClientTable) throws(SharedTableError) {
        let snapshot = try table.publish(hub: health.hubName,
                                         rows: rows.rows.map { ($0.session, $0.publishedJSON()) },
                                         freshMillis: timing.freshMillis, keepMillis: timing.keepMillis)
        health.received(head: snapshot.head, rows: snapshot.others.compactMap { other in
            ClientRow(published: other.json).map { ClientHealth.Remote.Row(hub: other.hub, row: $0, ageMillis: other.ageMillis) }
        })
    }
}
