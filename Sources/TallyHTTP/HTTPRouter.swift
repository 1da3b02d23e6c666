/// Routes by method and path pattern (`/v1/records/{name...}`, `/healthz`).
/// Built mutable, then frozen by value: the frozen router is immutable.
///
/// Patterns form a tree of segments. At each level a literal segment is
/// tried before `{param}`, and `{param...}` last, so `/v1/records/count`
/// beats `/v1/records/{name}` whatever the order the routes were added in;
/// when a more specific branch leads nowhere the next one is tried, so
/// routes never shadow each other by accident. Paths are matched exactly:
/// `/healthz/` is not `/healthz` (a trailing slash is an empty last segment).
///
/// Methods are compared exactly (RFC 9110 §9.1: methods are case-sensitive)
/// and HEAD is not implied by GET: a route for HEAD must be added.
public struct HTTPRouter<Handler: Sendable>: Sendable {
    /// A registered route: its handler and the names of its parameters in
    /// path order. Names live on the route, not on the tree, so `/a/{id}`
    /// and `/a/{name}/b` can share a parameter node.
    struct Route: Sendable {
        var handler: Handler
        var parameterNames: [String]
    }

    /// One level of the pattern tree.
    struct Node: Sendable {
        /// Literal children. A short array scanned in order beats a
        /// dictionary here: comparing a Substring with a String allocates
        /// nothing, while a dictionary lookup would need a String key.
        var literals: [(segment: String, node: Int)] = []
        /// The `{param}` child.
        var parameter: Int?
        /// Routes whose pattern ends at this node, by method.
        var routes: [String: Route] = [:]
        /// Routes whose `{param...}` starts at this node, by method.
        var restRoutes: [String: Route] = [:]
    }

    /// The tree, stored flat (children are indices) so the router is a
    /// plain value with no reference types to share between threads.
    var nodes: [Node] = [Node()]

    public init() {}

    /// `pattern` segments: literal, `{param}` (one segment) or a final
    /// `{param...}` (the rest of the path, slashes included).
    ///
    /// Routes are configuration written by the programmer, so a malformed
    /// pattern or a duplicate route stops the program at startup (a
    /// precondition) rather than being ignored.
    public mutating func add(_ method: String, _ pattern: String, _ handler: Handler) {
        precondition(pattern.utf8.first == ASCII.slash, "route pattern '\(pattern)' must start with '/'")
        let segments = Self.segments(of: pattern)
        var node = 0
        var names: [String] = []
        for (position, segment) in segments.enumerated() {
            if segment.hasPrefix("{") && segment.hasSuffix("}") {
                let inner = segment.dropFirst().dropLast()
                if inner.hasSuffix("...") {
                    precondition(position == segments.count - 1, "'\(segment)' must be the last segment of '\(pattern)'")
                    let name = String(inner.dropLast(3))
                    precondition(!name.isEmpty, "empty parameter name in '\(pattern)'")
                    names.append(name)
                    precondition(nodes[node].restRoutes[method] == nil, "duplicate route \(method) \(pattern)")
                    nodes[node].restRoutes[method] = Route(handler: handler, parameterNames: names)
                    return
                }
                precondition(!inner.isEmpty && !inner.contains("{") && !inner.contains("}"),
                             "bad parameter '\(segment)' in '\(pattern)'")
                names.append(String(inner))
                if let child = nodes[node].parameter {
                    node = child
                } else {
                    nodes.append(Node())
                    nodes[node].parameter = nodes.count - 1
                    node = nodes.count - 1
                }
            } else {
                precondition(!segment.contains("{") && !segment.contains("}"), "bad segment '\(segment)' in '\(pattern)'")
                if let child = nodes[node].literals.first(where: { $0.segment == segment })?.node {
                    node = child
                } else {
                    nodes.append(Node())
                    nodes[node].literals.append((String(segment), nodes.count - 1))
                    node = nodes.count - 1
                }
            }
        }
        precondition(nodes[node].routes[method] == nil, "duplicate route \(method) \(pattern)")
        nodes[node].routes[method] = Route(handler: handler, parameterNames: names)
    }

    /// Finds the route for a request.
    ///
    /// - Parameter path: the decoded request path (`HTTPRequest.path`).
    /// - Returns: the first matching route in priority order that accepts
    ///   `method`; otherwise, if routes match the path under other methods,
    ///   all of those methods (for the 405 `Allow` header, RFC 9110 §15.5.6);
    ///   otherwise `.notFound`.
    public func match(method: String, path: String) -> HTTPRouteMatch<Handler> {
        guard path.utf8.first == ASCII.slash else { return .notFound }
        let segments = Self.segments(of: path)
        var captured: [Substring] = []
        var allowed: [String] = []
        if let route = search(node: 0, depth: 0, segments: segments, path: path, method: method,
                              captured: &captured, allowed: &allowed) {
            var parameters: [String: String] = [:]
            if !captured.isEmpty {
                parameters.reserveCapacity(captured.count)
                for (name, value) in zip(route.parameterNames, captured) { parameters[name] = String(value) }
            }
            return .found(route.handler, parameters: parameters)
        }
        if allowed.isEmpty { return .notFound }
        return .methodNotAllowed(allowed: Set(allowed).sorted())
    }

    /// Depth-first search in priority order (literal, parameter, rest).
    /// Returns the first route for `method`; meanwhile collects the methods
    /// of routes that match the path but not the method.
    func search(node index: Int, depth: Int, segments: [Substring], path: String, method: String,
                captured: inout [Substring], allowed: inout [String]) -> Route? {
        let node = nodes[index]
        if depth == segments.count {
            if let route = node.routes[method] { return route }
            allowed.append(contentsOf: node.routes.keys)
            return nil
        }
        let segment = segments[depth]
        if let child = node.literals.first(where: { $0.segment == segment })?.node,
           let route = search(node: child, depth: depth + 1, segments: segments, path: path, method: method,
                              captured: &captured, allowed: &allowed) {
            return route
        }
        if let child = node.parameter, !segment.isEmpty {
            captured.append(segment)
            if let route = search(node: child, depth: depth + 1, segments: segments, path: path, method: method,
                                  captured: &captured, allowed: &allowed) {
                return route
            }
            captured.removeLast()
        }
        if !node.restRoutes.isEmpty {
            // The rest of the path from this segment on, slashes included;
            // it must not be empty (`/v1/records/` has no name).
            let rest = path[segment.startIndex...]
            if !rest.isEmpty {
                if let route = node.restRoutes[method] {
                    captured.append(rest)
                    return route
                }
                allowed.append(contentsOf: node.restRoutes.keys)
            }
        }
        return nil
    }

    /// The segments after the leading '/', empty ones kept: "/" is one empty
    /// segment and "/a/" is "a" then an empty one, so a trailing slash
    /// matters. Patterns and paths are split the same way.
    static func segments(of path: String) -> [Substring] {
        path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
    }
}
