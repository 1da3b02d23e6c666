/// The outcome of `HTTPRouter.match(method:path:)`.
public enum HTTPRouteMatch<Handler: Sendable>: Sendable {
    /// A route matched; `parameters` maps each `{name}` of its pattern to the
    /// path segment (or, for `{name...}`, the rest of the path) it captured.
    case found(Handler, parameters: [String: String])
    /// The path exists under other methods (answer 405 with `Allow`).
    /// The methods are sorted and deduplicated.
    case methodNotAllowed(allowed: [String])
    case notFound
}
