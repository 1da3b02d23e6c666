import Synchronization
import TallyConcurrency
import TallyEngine
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
        /// The sync protocol's WebSocket: its handler learns who the
        /// upgrade request's token named.
        case sync
        /// Answered later through the responder, from any thread: for work
        /// that must not run on the loop (hashing and fsyncing blobs).
        /// `screen` refuses an upload from its headers, before the body is read.
        case deferred(screen: (@Sendable (HTTPRequest, [String: String]) -> HTTPResponse?)?,
                      @Sendable (HTTPRequest, [String: String], HTTPResponder) -> Void)
    }

    private let router: HTTPRouter<Route>
    private let core: HubCore
    private let messageLimits: JSONLimits
    private let browserGuard: BrowserGuard
    let metricsSource = MetricsSource()

    init(configuration: HubConfiguration, core: HubCore, blobs: BlobStore, clients: ClientHealth) {
        self.core = core
        self.browserGuard = configuration.browserGuard
        var router = HTTPRouter<Route>()
        router.add("GET", "/healthz", .respond { _, _ in core.healthResponse() })
        let metrics = metricsSource
        router.add("GET", "/metrics", .respond { _, _ in
            var response = HTTPResponse(status: .ok, body: Array(metrics.render().utf8))
            response.headers.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            return response
        })
        // The hub's peers, for a board that moves to one when this hub goes
        // (no token needed: the page's Content-Security-Policy names them too).
        let hubs = configuration.peers.json.serialized()
        router.add("GET", "/v1/hubs", .respond { _, _ in .json(.ok, hubs) })
        if configuration.servesEcho {
            router.add("GET", "/echo", .upgrade(WebSocketRoute { _ in EchoHandler() }))
        }
        var messageLimits = JSONLimits()
        messageLimits.maxBytes = configuration.server.webSocket.maxMessageSize
        let limits = messageLimits
        self.messageLimits = messageLimits
        router.add("GET", "/v1/ws", .sync)
        RESTRoutes.add(to: &router, limits: limits)
        ClientsRoute.add(to: &router, core: core, health: clients)
        BlobRoutes.add(to: &router, blobs: blobs, logger: core.logger) { request, operation, name in
            Self.authorize(core: core, request, Permission(rawValue: operation) ?? .write, name: name)
        }
        if let web = configuration.webDirectory {
            StaticFiles(root: web, connectSources: configuration.peers.connectSources).add(to: &router)
        }
        self.router = router
    }

    /// Refuses, from its headers alone, a request whose body the hub should
    /// not read: from a page it does not take, to a route that takes no body,
    /// without a valid token, or not declared as JSON.
    func screen(_ head: HTTPRequest, context: RequestContext) -> HTTPResponse? {
        if let refusal = browserGuard.check(head, isTLS: context.isTLS, upgrade: false) {
            return refuse(refusal)
        }
        switch router.match(method: head.method, path: head.path) {
        case .found(.rest, _) where BrowserGuard.changesState(head.method) && head.method != "DELETE":
            if case .refused(let refusal) = Self.authenticate(core: core, head, headerRequired: true) { return refusal }
            return BrowserGuard.checkJSONBody(head, hasBody: true).map(refuse)
        case .found(.deferred(let screen, _), let parameters) where head.method == "PUT":
            return screen?(head, parameters)
        case .found:
            return .error(.badRequest, code: "bad_request", message: "\(head.method) \(head.path) takes no request body; send it without one")
        case .methodNotAllowed, .notFound:
            // `handle` answers these without looking at a body.
            guard case .respond(let response) = handle(head, context: context) else { return nil }
            return response
        }
    }

    /// Counts and logs a refusal answered on the loop, and its response.
    private func refuse(_ error: ProtocolError) -> HTTPResponse {
        core.noteRefusalFromLoop(error, actor: nil)
        return REST.response(for: error)
    }

    func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction {
        let upgrade = request.headers.containsToken("Upgrade", "websocket")
        if let refusal = browserGuard.check(request, isTLS: context.isTLS, upgrade: upgrade) {
            return .respond(refuse(refusal))
        }
        switch router.match(method: request.method, path: request.path) {
        case .found(.respond(let respond), let parameters):
            return .respond(respond(request, parameters))
        case .found(.rest(let parse), let parameters):
            let actor: Actor
            switch Self.authenticate(core: core, request, headerRequired: true) {
            case .known(let known): actor = known!
            case .refused(let refusal): return .respond(refusal)
            }
            if let refusal = BrowserGuard.checkJSONBody(request, hasBody: !request.body.isEmpty) {
                return .respond(refuse(refusal))
            }
            let operation: RESTCall.Operation
            do { operation = try parse(request, parameters) } catch {
                return .respond(REST.response(for: error))
            }
            let core = core
            return .deferred { responder in
                core.post(.rest(RESTCall(operation: operation, responder: responder, actor: actor)))
            }
        case .found(.sync, _):
            let actor: Actor?
            switch Self.authenticate(core: core, request, headerRequired: false) {
            case .known(let known): actor = known
            case .refused(let refusal): return .respond(refusal)
            }
            // Connections that have not authenticated are capped: each
            // costs the hub memory and a slot before it proves anything.
            if actor == nil,
               core.metrics.unauthenticated.load(ordering: .relaxed) >= core.configuration.maxUnauthenticatedConnections {
                var response = REST.response(for: ProtocolError(.tooManyConnections,
                    "the hub has \(core.configuration.maxUnauthenticatedConnections) connections waiting to authenticate; send the token in the Authorization header of the upgrade, or retry shortly"))
                response.headers.set("Retry-After", "1")
                return .respond(response)
            }
            let core = core
            let limits = messageLimits
            return .upgrade(WebSocketRoute(subprotocols: ["tally.v1"]) { _ in
                SyncHandler(core: core, limits: limits, actor: actor)
            })
        case .found(.deferred(_, let start), let parameters):
            return .deferred { responder in start(request, parameters, responder) }
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

extension HubRoutes {
    /// Who the request's `Authorization: Bearer` token names. In open mode
    /// everyone is admin; otherwise a bad token is refused with 401, and so is
    /// a missing one where `headerRequired` (a WebSocket may still send its
    /// token in hello, since browsers cannot set headers on the upgrade).
    static func authenticate(core: HubCore, _ request: HTTPRequest, headerRequired: Bool) -> Authentication {
        guard let authenticator = core.configuration.authenticator else {
            return .known(Actor(user: "anonymous", role: "admin"))
        }
        guard let header = request.headers["Authorization"] else {
            if !headerRequired { return .known(nil) }
            return .refused(unauthorized(core: core, "this hub needs a token: send Authorization: Bearer <token>"))
        }
        guard let token = Authenticator.bearerToken(header), let actor = authenticator.actor(token: token) else {
            return .refused(unauthorized(core: core, "the Authorization header does not carry a token this hub knows (expected: Bearer <token>)"))
        }
        return .known(actor)
    }

    enum Authentication {
        case known(Actor?)
        case refused(HTTPResponse)
    }

    /// Checks an operation for routes answered outside the core (blobs).
    static func authorize(core: HubCore, _ request: HTTPRequest, _ permission: Permission, name: String) -> HTTPResponse? {
        let actor: Actor
        switch authenticate(core: core, request, headerRequired: true) {
        case .known(let known): actor = known!
        case .refused(let refusal): return refusal
        }
        switch core.configuration.planner.policy.decide(actor, permission, name: name) {
        case .allowed: return nil
        case .ifOwner, .denied:
            let error = AccessPolicy.denied(actor, permission, name: name)
            core.noteRefusalFromLoop(error, actor: actor)
            return REST.response(for: error)
        }
    }

    private static func unauthorized(core: HubCore, _ message: String) -> HTTPResponse {
        let error = ProtocolError(.unauthorized, message)
        core.noteRefusalFromLoop(error, actor: nil)
        var response = REST.response(for: error)
        response.headers.set("WWW-Authenticate", "Bearer realm=\"tally\"")
        return response
    }
}

/// Where `/metrics` reads its figures; set once the server exists.
final class MetricsSource: Sendable {
    private let source = LockedValueBox<(@Sendable () -> String)?>(nil)
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
