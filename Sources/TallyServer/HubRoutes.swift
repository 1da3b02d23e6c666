import Synchronization
import TallyHTTP
import TallyNet
import TallyProtocol
import TallyWebSocket

/// The hub's HTTP application: a router frozen at start.
final class HubRoutes: HTTPApplication {
    enum Route: Sendable {
        case respond(@Sendable (HTTPRequest, [String: String]) -> HTTPResponse)
        /// Parsed on the loop, answered by the core: an operation or an
        /// immediate error response.
        case rest(@Sendable (HTTPRequest, [String: String]) throws(ProtocolError) -> RESTCall.Operation)
        case upgrade(WebSocketRoute)
    }

    private let router: HTTPRouter<Route>
    private let core: HubCore
    let metricsSource = MetricsSource()

    init(configuration: HubConfiguration, core: HubCore) {
        self.core = core
        var router = HTTPRouter<Route>()
        router.add("GET", "/healthz", .respond { _, _ in
            .json(.ok, Array(#"{"status":"ok"}"#.utf8))
        })
        let metrics = metricsSource
        router.add("GET", "/metrics", .respond { _, _ in
            var response = HTTPResponse(status: .ok, body: Array(metrics.render().utf8))
            response.headers.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            return response
        })
        if configuration.echo {
            router.add("GET", "/echo", .upgrade(WebSocketRoute { _ in EchoHandler() }))
        }
        var messageLimits = JSONLimits()
        messageLimits.maxBytes = configuration.server.webSocket.maxMessageSize
        let limits = messageLimits
        router.add("GET", "/v1/ws", .upgrade(WebSocketRoute(subprotocols: ["tally.v1"]) { _ in
            SyncHandler(core: core, limits: limits)
        }))
        RESTRoutes.add(to: &router, limits: limits)
        self.router = router
    }

    func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction {
        switch router.match(method: request.method, path: request.path) {
        case .found(.respond(let respond), let parameters):
            return .respond(respond(request, parameters))
        case .found(.rest(let parse), let parameters):
            let operation: RESTCall.Operation
            do { operation = try parse(request, parameters) } catch {
                return .respond(REST.response(for: error))
            }
            let core = core
            return .deferred { responder in core.post(.rest(RESTCall(operation: operation, responder: responder))) }
        case .found(.upgrade(let route), _):
            return .upgrade(route)
        case .methodNotAllowed(var allowed):
            // Every GET route answers HEAD too (the connection drops the body).
            if allowed.contains("GET"), !allowed.contains("HEAD") { allowed.append("HEAD") }
            var response = HTTPResponse.error(.methodNotAllowed, code: "method_not_allowed",
                message: "\(request.method) is not allowed on \(request.path); use \(allowed.joined(separator: " or "))")
            response.headers.set("Allow", allowed.joined(separator: ", "))
            return .respond(response)
        case .notFound:
            return .respond(.error(.notFound, code: "not_found", message: "no route for \(request.path)"))
        }
    }
}

/// Where `/metrics` reads its figures; set once the server exists.
final class MetricsSource: Sendable {
    private let source = Locked<(@Sendable () -> String)?>(nil)
    func set(_ body: @escaping @Sendable () -> String) { source.withLock { $0 = body } }
    func render() -> String {
        let body = source.withLock { $0 }
        return body?() ?? ""
    }
}

/// `/echo`: sends every message back as it came (text stays text).
final class EchoHandler: WebSocketHandler {
    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        socket.send(kind, payload)
    }
}
