import TallyProtocol

/// Why a one-shot call to the hub (`BlockingTallyClient`, `RESTClient`)
/// failed. `description` is the one wording of each case, the CLI's
/// (`tally: <description>` on stderr).
public enum HubError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No connection could be made (the reason: resolution, refusal, TLS).
    case unreachable(url: String, reason: String)
    /// None of several hubs could be reached: each one tried, in order,
    /// with why (`unreachable` for each).
    case noneReachable([HubError])
    /// The hub answered with an error object (`code`, `message`, details).
    case refused(JSONObject)
    /// The connection broke or the hub sent something unreadable.
    case disconnected(String)
    /// The hub did not answer in time.
    case timeout
    /// The token would go out in clear text to a host that is not loopback.
    case insecureToken(url: String)

    public var description: String {
        switch self {
        case .unreachable(let url, let reason):
            "cannot reach the hub at \(url): \(reason). Is 'tally serve' running? Set --server or TALLY_SERVER."
        case .noneReachable(let attempts):
            "cannot reach any of the \(attempts.count) hubs: "
                + attempts.map { attempt in
                    if case .unreachable(let url, let reason) = attempt { "\(url): \(reason)" } else { attempt.description }
                }.joined(separator: "; ")
                + ". Is 'tally serve' running? Set --server or TALLY_SERVER."
        case .refused(let error):
            "\(error["message"]?.stringValue ?? "the hub refused the request") (\(error["code"]?.stringValue ?? "error"))"
        case .disconnected(let reason):
            reason
        case .timeout:
            "the hub did not answer in time"
        case .insecureToken(let url):
            "refusing to send the token in plain text to \(url): use wss:// (or https://), a loopback address, or --insecure if you accept that anyone on the network can read it"
        }
    }

    /// The refusal's `code`, if the hub refused.
    public var code: String? {
        if case .refused(let error) = self { return error["code"]?.stringValue }
        return nil
    }

    /// A hub refusal as the error the async client throws.
    public var protocolError: ProtocolError? {
        guard case .refused(let object) = self else { return nil }
        return ProtocolError(reply: object)
    }
}
