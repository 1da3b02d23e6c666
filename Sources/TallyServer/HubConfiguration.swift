import TallyEngine
import TallyNet
import TallyStore

/// Everything `tally serve` decides before the hub starts.
public struct HubConfiguration: Sendable {
    public var server = ServerConfiguration()
    /// Serve the WebSocket echo endpoint at `/echo` (interop tests,
    /// benchmarks). nil: only in open mode — on a hub with users it would
    /// be an unauthenticated endpoint that inflates and deflates whatever
    /// it is sent.
    public var echo: Bool?
    /// Serving a non-loopback address without users (`--open`): the
    /// DNS-rebinding check then takes any address literal as `Host`.
    public var openNetwork = false
    /// Host names taken besides loopback ones in open mode (`--allow-host`).
    public var allowedHosts: [String] = []
    /// Origins whose pages may open WebSockets and send writes, besides the
    /// hub's own (`--allow-origin`) and its peers'.
    public var allowedOrigins: [String] = []
    /// The other hubs of this hub's cluster (`--peers`, config `peers`):
    /// listed by `GET /v1/hubs`, allowed in the board's `connect-src`, and
    /// their pages' origins allowed here.
    public var peers = PeerHubs()
    /// Where the SQLite store lives; `:memory:` keeps everything in memory
    /// (tests, benchmarks of the non-durable path).
    public var dataDirectory = "./tally-data"
    /// A PostgreSQL store (`postgres://USER@HOST:PORT/DB`, `--store`) instead
    /// of SQLite in `dataDirectory`, which then holds the photos (and its lock).
    public var storeURL: String?
    /// This hub's name in `GET /v1/admin/clients` (config `hubName`,
    /// `--hub-name`); nil is `<hostname>:<port>` (`HubName.standard`).
    public var hubName: String?
    /// How often a hub on PostgreSQL publishes its clients' rows and how
    /// long others' rows count (tests shorten them).
    var clientPublishing = ClientHealthPublisher.Timing()
    public var durability = Durability.full
    public var retention = StoreRetention()
    public var core = CoreConfiguration()
    /// Largest photo `PUT /v1/blobs/{sha256}` accepts.
    public var maxBlobBytes = 16 << 20
    /// Most bytes all photos together may hold (config `blobQuota`).
    public var blobQuotaBytes = BlobStore.defaultQuota
    /// The `Clients` directory (`web/`, `js/`) the dashboard is served
    /// from at `/`, `/app/…` and `/js/…`; nil serves no dashboard.
    public var webDirectory: String?
    /// The analysis of intake photos (config `analysis`, `IntakeAnalyzer`).
    public var analysis = AnalysisSettings()
    public init() {}

    /// The hub's name once it listens on `port`.
    public func hubName(port: Int) -> String {
        hubName ?? HubName.standard(port: port)
    }

    /// Whether `/echo` is served: as asked, else only in open mode.
    public var servesEcho: Bool { echo ?? (core.authenticator == nil) }

    /// The origin and host checks for this hub (see `BrowserGuard`).
    public var browserGuard: BrowserGuard {
        let rule: BrowserGuard.HostRule = core.authenticator != nil ? .any : openNetwork ? .addresses : .loopback
        return BrowserGuard(hostRule: rule, allowedHosts: allowedHosts, allowedOrigins: allowedOrigins + peers.origins)
    }
}
