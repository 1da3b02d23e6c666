import TallyFileLock
import TallyHTTP
import TallyNet
import TallyStore

/// The running hub: the store, the sync core and the network server.
public final class Hub: Sendable {
    public let server: Server
    public let core: HubCore
    /// Photos, content-addressed (`/v1/blobs/{sha256}`): in the data
    /// directory, or in the database of a PostgreSQL store.
    public let blobs: BlobStore
    public var port: Int { server.port }
    /// This hub's name in `/v1/admin/clients` (`HubName`).
    public let name: String
    /// Publishes the clients' sync health for the other hubs on the same
    /// PostgreSQL database and reads theirs; nil on SQLite or in memory.
    private let publisher: ClientHealthPublisher?
    /// Held from start to shutdown, so that one hub at a time uses the data
    /// directory (see `DataDirectory`); nil for `:memory:`.
    private let directoryLock: FileLock?
    /// Reads codes and text in intake photos, off the loops (`IntakeAnalyzer`).
    let analyzer: IntakeAnalyzer

    /// Locks the data directory, opens the store, starts the core, binds
    /// and starts serving.
    public convenience init(configuration: HubConfiguration) throws(HubStartError) {
        let directory = configuration.dataDirectory
        let lock = directory == ":memory:" ? nil : try DataDirectory.lock(directory)
        let store: any Store
        do {
            if let url = configuration.storeURL {
                store = try PostgresStore(url: url, retention: configuration.retention)
            } else if lock == nil {
                store = MemoryStore(retention: configuration.retention)
            } else {
                store = try SQLiteStore(directory: directory, durability: configuration.durability,
                                        retention: configuration.retention)
            }
        } catch {
            throw HubStartError(opening: error, in: directory)
        }
        try self.init(configuration: configuration, store: store, directoryLock: lock)
    }

    /// Starts the core on `store`, opened already (tests pass one with
    /// faults in it), binds and starts serving.
    init(configuration: HubConfiguration, store: any Store, directoryLock: FileLock? = nil) throws(HubStartError) {
        self.directoryLock = directoryLock
        let inMemory = configuration.dataDirectory == ":memory:"
        do {
            core = try HubCore(store: store, configuration: configuration.core, logger: configuration.server.logger)
        } catch {
            throw .store(error)
        }
        do {
            if let url = configuration.storeURL {
                // Shared by every hub on the database; --data keeps the lock only.
                blobs = try BlobStore(postgres: url, maxBlobSize: configuration.maxBlobBytes,
                                      quota: configuration.blobQuotaBytes)
            } else {
                blobs = try BlobStore(directory: inMemory ? nil : configuration.dataDirectory,
                                      maxBlobSize: configuration.maxBlobBytes, quota: configuration.blobQuotaBytes)
            }
            if configuration.storeURL != nil, !inMemory,
               let imported = try blobs.importFiles(fromDataDirectory: configuration.dataDirectory) {
                configuration.server.logger.info("blobs.imported", [
                    "photos": String(imported.photos), "bytes": String(imported.bytes),
                    "damaged": String(imported.damaged), "moved_to": imported.movedTo])
            }
        } catch {
            throw HubStartError(opening: error, in: configuration.dataDirectory)
        }
        analyzer = IntakeAnalyzer(core: core, blobs: blobs, settings: configuration.analysis)
        core.intakeAnalyzer = analyzer
        core.start()
        analyzer.start()
        let health = ClientHealth(freshMillis: configuration.clientPublishing.freshMillis)
        let routes = HubRoutes(configuration: configuration, core: core, blobs: blobs, clients: health)
        // Photo uploads are the large request bodies: the parser allows them
        // on the blob routes alone. Record writes take what a record may
        // hold (twice over, for a pretty-printed body), so REST accepts every
        // record WebSocket does when --max-record-size is above the default.
        var serverConfiguration = configuration.server
        serverConfiguration.httpLimits.largeBodies.append(
            HTTPLimits.LargeBody(pathPrefix: "/v1/blobs/", maxBytes: configuration.maxBlobBytes, setting: "maxBlobSize"))
        let recordBody = 2 * configuration.core.limits.maxRecordBytes
        if recordBody > serverConfiguration.httpLimits.maxBodyBytes {
            serverConfiguration.httpLimits.largeBodies.append(
                HTTPLimits.LargeBody(pathPrefix: "/v1/records/", maxBytes: recordBody, setting: "maxRecordSize"))
        }
        do {
            server = try Server(configuration: serverConfiguration, application: routes)
        } catch {
            analyzer.stop()
            core.stop()
            blobs.close()
            throw .bind(error)
        }
        name = configuration.hubName(port: server.port)
        health.hubName = name
        if let url = configuration.storeURL {
            publisher = ClientHealthPublisher(url: url, core: core, health: health, logger: configuration.server.logger,
                                              timing: configuration.clientPublishing)
            publisher?.start()
        } else {
            publisher = nil
        }
        let core = core
        let blobs = blobs
        let analyzer = analyzer
        routes.metricsSource.set { [server] in
            server.metricsSnapshot().prometheusText + core.metrics.prometheusText
                + HubMetrics.prometheusText(core.store.health) + blobs.prometheusText + analyzer.prometheusText
        }
    }

    /// Graceful shutdown: stop the network (see `Server.shutdown`), then let
    /// the core commit what it accepted and close the store.
    public func shutdown() {
        server.shutdown()
        // Before the core stops: a round may be waiting for its rows.
        publisher?.stop()
        // Before the core stops: no outcome may reach it after.
        analyzer.stop()
        core.stop()
        blobs.close()
        directoryLock?.release()
    }
}
