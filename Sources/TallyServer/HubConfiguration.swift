import TallyNet

/// Everything `tally serve` decides before the hub starts.
public struct HubConfiguration: Sendable {
    public var server = ServerConfiguration()
    /// Serve the WebSocket echo endpoint at `/echo` (interop tests, benchmarks).
    public var echo = true
    public init() {}
}
