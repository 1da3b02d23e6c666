import Testing
import TallyHTTP

@Suite("HTTPRouter")
struct HTTPRouterTests {
    /// A frozen router whose handlers are the names of the routes.
    static let router: HTTPRouter<String> = {
        var router = HTTPRouter<String>()
        router.add("GET", "/", "root")
        router.add("GET", "/healthz", "health")
        router.add("GET", "/v1/records/{name...}", "get record")
        router.add("PUT", "/v1/records/{name...}", "put record")
        router.add("GET", "/v1/records", "list records")
        router.add("GET", "/v1/lists/{list}/items/{item}", "get item")
        router.add("DELETE", "/v1/lists/{list}/items/{item}", "delete item")
        router.add("GET", "/v1/lists/{list}", "get list")
        router.add("GET", "/v1/lists/stats", "list stats")        // added after {list}, still wins
        router.add("POST", "/v1/lists/stats/reset", "reset stats")
        router.add("POST", "/v1/events/{topic}", "publish")
        router.add("DELETE", "/v1/events/{topic}", "drop")
        return router
    }()

    func expectFound(_ method: String, _ path: String, _ handler: String, _ parameters: [String: String] = [:],
                     sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .found(let found, let captured) = Self.router.match(method: method, path: path) else {
            Issue.record("\(method) \(path) did not match", sourceLocation: sourceLocation)
            return
        }
        #expect(found == handler, sourceLocation: sourceLocation)
        #expect(captured == parameters, sourceLocation: sourceLocation)
    }

    func expectNotFound(_ method: String, _ path: String, sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .notFound = Self.router.match(method: method, path: path) else {
            Issue.record("\(method) \(path) should be 404", sourceLocation: sourceLocation)
            return
        }
    }

    func expectNotAllowed(_ method: String, _ path: String, allowed: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .methodNotAllowed(let methods) = Self.router.match(method: method, path: path) else {
            Issue.record("\(method) \(path) should be 405", sourceLocation: sourceLocation)
            return
        }
        #expect(methods == allowed, sourceLocation: sourceLocation)
    }

    @Test func literalRoutes() {
        expectFound("GET", "/", "root")
        expectFound("GET", "/healthz", "health")
        expectFound("GET", "/v1/records", "list records")
    }

    @Test func parametersCaptureOneSegment() {
        expectFound("GET", "/v1/lists/todo", "get list", ["list": "todo"])
        expectFound("DELETE", "/v1/lists/todo/items/42", "delete item", ["list": "todo", "item": "42"])
        expectNotFound("GET", "/v1/lists/todo/items")
        expectNotFound("GET", "/v1/lists//items/42")  // an empty segment is not a parameter
    }

    @Test func restParameterTakesSlashes() {
        expectFound("GET", "/v1/records/a", "get record", ["name": "a"])
        expectFound("PUT", "/v1/records/users/42/profile", "put record", ["name": "users/42/profile"])
        // A decoded %2F arrives as a slash and is kept.
        expectFound("GET", "/v1/records/a/b/", "get record", ["name": "a/b/"])
    }

    @Test func restParameterMustNotBeEmpty() {
        expectNotFound("GET", "/v1/records/")
    }

    @Test func literalsWinOverParametersWhateverTheOrder() {
        expectFound("GET", "/v1/lists/stats", "list stats")
        // The literal branch has no GET for a deeper path, so the parameter branch is tried.
        expectFound("GET", "/v1/lists/stats/items/3", "get item", ["list": "stats", "item": "3"])
    }

    @Test func methodNotAllowedListsSortedMethods() {
        expectNotAllowed("PATCH", "/v1/events/news", allowed: ["DELETE", "POST"])
        expectNotAllowed("DELETE", "/v1/records/a/b", allowed: ["GET", "PUT"])
        // Methods from every route that matches the path, deduplicated.
        expectNotAllowed("PUT", "/v1/lists/stats", allowed: ["GET"])
        expectNotAllowed("GET", "/v1/lists/stats/reset", allowed: ["POST"])
    }

    @Test func headIsNotImplied() {
        expectNotAllowed("HEAD", "/healthz", allowed: ["GET"])
    }

    @Test func methodsAreCaseSensitive() {
        expectNotAllowed("get", "/healthz", allowed: ["GET"])
    }

    @Test func unknownPathsAreNotFound() {
        expectNotFound("GET", "/nope")
        expectNotFound("GET", "/healthz/")   // a trailing slash is a different path
        expectNotFound("GET", "/healthzz")
        expectNotFound("GET", "//healthz")
        expectNotFound("OPTIONS", "*")
        expectNotFound("GET", "")
    }

    @Test func emptyRouterFindsNothing() {
        guard case .notFound = HTTPRouter<Int>().match(method: "GET", path: "/") else {
            Issue.record("expected 404")
            return
        }
    }
}
