import TallyNet
import TallyStore

/// The settings `tally serve` was given on its command line, each nil (or
/// empty, or off) when not given. They are applied over the config file's
/// members (`HubConfiguration.init(file:overrides:)`): a flag wins over the
/// file, the file over the embedded defaults.
///
/// The values are already checked (ranges, origins, host names, the web
/// directory); the CLI words what is wrong with a flag, this type only
/// says where each one goes. The TLS certificate is loaded by the caller
/// into `server.tls`.
public struct HubOverrides: Sendable {
    public var host: String?
    public var port: Int?
    public var threads: Int?
    public var dataDirectory: String?
    public var storeURL: String?
    /// `--hub-name`.
    public var hubName: String?
    public var durability: Durability?
    public var retainChanges: Int?
    public var retainBytes: Int?
    public var retainAgeSeconds: Double?
    public var maxRecordBytes: Int?
    public var blobQuotaBytes: Int?
    public var cacheBytes: Int?
    public var maxMessageBytes: Int?
    public var maxOutboundBytes: Int?
    public var pingIntervalMillis: Int64?
    public var idleTimeoutMillis: Int64?
    /// `--no-compression` turns permessage-deflate off.
    public var compression = true
    /// `--echo` (true) or `--no-echo` (false).
    public var echo: Bool?
    /// `--allow-origin`, added to the file's `allowOrigins`.
    public var allowedOrigins: [String] = []
    /// `--allow-host`, added to the file's `allowHosts`.
    public var allowedHosts: [String] = []
    /// `--peers`, in place of the file's `peers`.
    public var peers: PeerHubs?
    public var maxSubscriptions: Int?
    public var maxUnauthenticated: Int?
    /// `--open`: a non-loopback address may be served without users.
    public var openNetwork = false
    /// `--web`; nil looks for the checkout's `Clients/` (`StaticFiles.locateDefault`).
    public var webDirectory: String?
    public var logLevel: Logger.Level?

    public init() {}
}
