import CSQLite
import TallyConcurrency
import TallyPostgres

/// The store on a PostgreSQL server: the same group committer as the
/// SQLite and memory stores, driving a `PostgresWriter` (one PostgreSQL
/// transaction per group, the head row moved and checked in it, one NOTIFY
/// per group), and readers with their own connections.
///
/// Several hubs may share one database (`SharedStore`): the head row makes
/// a group built on a head another hub has moved fail
/// (`StoreError.isHeadMoved`) instead of interleaving seqs, a watcher
/// thread hears of every hub's commits, and the log keeps each record
/// change's prior state for the hubs that catch up on it. Does not commit
/// in place (`InPlaceCommitting`): a commit costs server round trips, which
/// an event loop should not wait for, so every unit goes to the writer.
public final class PostgresStore: SharedStore {
    /// The server, as given (it may hold a password: never log it; use
    /// `PostgresURL`'s description).
    let url: String
    let committer: GroupCommitter
    let diagnostics: LockedValueBox<StoreDiagnostics>
    /// Started by `watchHead`, stopped by `close`.
    private let watcher: PostgresHeadWatcher

    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`), brings the schema
    /// up to date (creating it in an empty database) and reads the head.
    ///
    /// - Parameters:
    ///   - retention: how much change log and idempotency to keep.
    ///   - clock: compared with change and idempotency times for age-based retention.
    public convenience init(url: String, retention: StoreRetention = .init(),
                            clock: StoreClock = .system) throws(StoreError) {
        try self.init(url: url, retention: retention, clock: clock, hooks: StoreTestHooks())
    }

    /// With test hooks in the writer (`StoreTestHooks`; `lending` and
    /// `listBlockSize` do not apply).
    @_spi(Testing) public init(url: String, retention: StoreRetention, clock: StoreClock,
                               hooks: StoreTestHooks) throws(StoreError) {
        self.url = url
        let connection: PostgresConnection
        do throws(PostgresError) {
            var options = Self.connectionOptions(role: "writer")
            // The writer holds the head row inside its groups: a hub that
            // stops mid-group (frozen, paused) holds up every other hub's
            // commits until the server ends its session.
            options.idleInTransactionTimeoutMillis = Self.writerIdleInTransactionMillis
            connection = try PostgresConnection(url: url, options: options)
        } catch {
            throw StoreError(error)
        }
        try PostgresSchema.migrate(connection)
        let diagnostics = LockedValueBox(StoreDiagnostics())
        self.diagnostics = diagnostics
        let committedHead = LockedValueBox<Int64>(0)
        let writer = try PostgresWriter(connection: connection, diagnostics: diagnostics, retention: retention,
                                        clock: clock, hooks: hooks,
                                        committedHead: committedHead)
        committer = GroupCommitter(backend: writer, lending: hooks.lending ?? .standard)
        watcher = try PostgresHeadWatcher(url: url, ownCommits: committedHead)
    }

    deinit {
        watcher.stop()
        committer.close()
    }

    /// `url` as logs may show it: the password replaced by `***`.
    public static func redacted(_ url: String) -> String {
        (try? PostgresURL(parsing: url).description) ?? "postgres://(a URL that does not parse)"
    }

    /// How long the server lets the writer's session sit idle inside a
    /// transaction: far above a group's few milliseconds and the 50 ms a
    /// lost race holds the head (`PostgresWriter.holdMillis`).
    static let writerIdleInTransactionMillis = 5_000

    static func connectionOptions(role: String) -> PostgresConnection.Options {
        var options = PostgresConnection.Options()
        options.applicationName = "tally-store-\(role)"
        return options
    }

    public func makeReader() throws(StoreError) -> any StoreReading {
        try PostgresReader(url: url)
    }

    public func start(onCommit: @escaping @Sendable (CommitOutcome) -> Void) {
        committer.start(onCommit: onCommit)
    }

    public func submit(_ unit: StoreUnit) {
        committer.submit(unit, wakeWriter: true)
    }

    public func applyBeforeStart(_ units: [StoreUnit]) throws(StoreError) {
        try committer.applyBeforeStart(units)
    }

    public func resumeAfterFailure() {
        committer.resumeAfterFailure()
    }

    public var health: StoreHealth {
        diagnostics.withLock { $0.health }
    }

    public func watchHead(_ onReading: @escaping @Sendable (HeadReading) -> Void) {
        watcher.start(onReading)
    }

    public func releaseHeldHead() {
        committer.releaseHold()
    }

    public var lastHeadReading: HeadReading? {
        watcher.latest.withLock { $0 }
    }

    public func close() {
        watcher.stop()
        committer.close()
    }
}
