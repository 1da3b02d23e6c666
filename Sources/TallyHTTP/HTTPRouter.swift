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
        var method: String
        var handler: Handler
        var parameterNames: [String]
    }

    /// One level of the pattern tree.
    ///
    /// Children and methods sit in short arrays scanned in order: a node has
    /// a handful of each, and comparing a few bytes beats hashing.
    struct Node: Sendable {
        /// Literal children, by the segment's UTF-8 bytes.
        var literals: [(segment: [UInt8], node: Int)] = []
        /// The `{param}` child.
        var parameter: Int?
        /// Routes whose pattern ends at this node.
        var routes: [Route] = []
        /// Routes whose `{param...}` starts at this node.
        var restRoutes: [Route] = []
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
        let segments = pattern.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
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
                    precondition(!nodes[node].restRoutes.contains { $0.method == method }, "duplicate route \(method) \(pattern)")
                    nodes[node].restRoutes.append(Route(method: method, handler: handler, parameterNames: names))
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
                let bytes = Array(segment.utf8)
                if let child = nodes[node].literals.first(where: { $0.segment == bytes })?.node {
                    node = child
                } else {
                    nodes.append(Node())
                    nodes[node].literals.append((bytes, nodes.count - 1))
                    node = nodes.count - 1
                }
            }
        }
        precondition(!nodes[node].routes.contains { $0.method == method }, "duplicate route \(method) \(pattern)")
        nodes[node].routes.append(Route(method: method, handler: handler, parameterNames: names))
    }

    /// Finds the route for a request.
    ///
    /// - Parameter path: the decoded request path (`HTTPRequest.path`).
    /// - Returns: the first matching route in priority order that accepts
    ///   `method`; otherwise, if routes match the path under other methods,
    ///   all of those methods (for the 405 `Allow` header, RFC 9110 §15.5.6);
    ///   otherwise `.notFound`.
    public func match(method: String, path: String) -> HTTPRouteMatch<Handler> {
        ASCII.withUTF8(path) { match(method: method, path: $0) }
    }

    /// Matching over the path's UTF-8 bytes: segments are byte ranges, found
    /// in one pass, and Strings are made only for the captured parameters.
    func match(method: String, path: UnsafeBufferPointer<UInt8>) -> HTTPRouteMatch<Handler> {
        guard path.first == ASCII.slash else { return .notFound }
        var search = Search(path: path, method: method)
        guard let route = search.run(in: self, node: 0, depth: 0) else {
            if search.allowed.isEmpty { return .notFound }
            return .methodNotAllowed(allowed: Set(search.allowed).sorted())
        }
        var parameters: [String: String] = [:]
        if !search.captured.isEmpty {
            parameters.reserveCapacity(search.captured.count)
            for (name, range) in zip(route.parameterNames, search.captured) {
                parameters[name] = String(decoding: UnsafeBufferPointer(rebasing: path[range]), as: UTF8.self)
            }
        }
        return .found(route.handler, parameters: parameters)
    }

    /// The state of one depth-first search through the tree.
    struct Search {
        let path: UnsafeBufferPointer<UInt8>
        let method: String
        /// Segment byte ranges after the leading '/', empty ones kept: "/" is
        /// one empty segment and "/a/" is "a" then an empty one, so a
        /// trailing slash matters. Patterns are split the same way in `add`.
        let segments: [Range<Int>]
        /// Ranges captured by the parameters on the current branch.
        var captured: [Range<Int>] = []
        /// Methods of routes that match the path but not the method.
        var allowed: [String] = []

        init(path: UnsafeBufferPointer<UInt8>, method: String) {
            self.path = path
            self.method = method
            var segments: [Range<Int>] = []
            segments.reserveCapacity(8)
            var start = 1
            for index in 1..<path.count where path[index] == ASCII.slash {
                segments.append(start..<index)
                start = index + 1
            }
            segments.append(start..<path.count)
            self.segments = segments
        }

        /// Tries the branches of a node in priority order (literal,
        /// parameter, rest) and returns the first route for `method`.
        mutating func run(in router: HTTPRouter, node index: Int, depth: Int) -> Route? {
            if depth == segments.count {
                return pick(router.nodes[index].routes)
            }
            let segment = segments[depth]
            if let child = literalChild(in: router, of: index, matching: segment),
               let route = run(in: router, node: child, depth: depth + 1) {
                return route
            }
            if let child = router.nodes[index].parameter, !segment.isEmpty {
                if captured.isEmpty { captured.reserveCapacity(4) }
                captured.append(segment)
                if let route = run(in: router, node: child, depth: depth + 1) { return route }
                captured.removeLast()
            }
            // The rest of the path from this segment on, slashes included;
            // it must not be empty (`/v1/records/` has no name).
            let rest = segment.lowerBound..<path.count
            if !rest.isEmpty, let route = pick(router.nodes[index].restRoutes) {
                if captured.isEmpty { captured.reserveCapacity(1) }
                captured.append(rest)
                return route
            }
            return nil
        }

        /// The route for `method` among `routes`, noting the other methods.
        mutating func pick(_ routes: [Route]) -> Route? {
            for route in routes where route.method == method { return route }
            allowed.append(contentsOf: routes.lazy.map(\.method))
            return nil
        }

        func literalChild(in router: HTTPRouter, of index: Int, matching segment: Range<Int>) -> Int? {
            let bytes = UnsafeBufferPointer(rebasing: path[segment])
            for literal in router.nodes[index].literals where literal.segment.count == bytes.count {
                if literal.segment.withUnsafeBufferPointer({ $0.elementsEqual(bytes) }) { return literal.node }
            }
            return nil
        }
    }
}
