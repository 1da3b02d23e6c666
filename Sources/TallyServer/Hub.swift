import TallyHTTP
import TallyNet

/// The running hub: the network server plus Tally's routes.
public final class Hub: Sendable {
    public let server: Server
    public var port: Int { server.port }

    /// Binds and starts serving. Throws when the address cannot be bound.
    public init(configuration: HubConfiguration) throws(SystemError) {
        let routes = HubRoutes(configuration: configuration)
        server = try Server(configuration: configuration.server, application: routes)
        routes.metricsSource.set { [server] in server.metricsSnapshot() }
    }

    /// Graceful shutdown (see `Server.shutdown`).
    public func shutdown() { server.shutdown() }
}
