import TallyEngine
import TallyNet
import TallyStore

/// Everything `tally serve` decides before the hub starts.
public struct HubConfiguration: Sendable {
    public var server = ServerConfiguration()
    /// Serve the WebSocket echo endpoint at `/echo` (interop tests, benchmarks).
    public var echo = true
    /// Where the SQLite store lives; `:memory:` keeps everything in memory
    /// (tests, benchmarks of the non-durable path).
    public var dataDirectory = "./tally-data"
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
    public init() {}
}
