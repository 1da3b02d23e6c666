import Synchronization
import TallyEngine
import TallyNet
import TallyProtocol
import TallyWebSocket

/// One client connection as the hub core knows it. `socket` belongs to the
/// connection's loop thread (a `LoopBound`: debug builds assert it is only
/// reached there); the rest is the core's.
///
/// `@unchecked Sendable`: the core's members below are plain vars, touched
/// by whichever thread holds the core (`CoreMailbox`), one at a time.
final class Session: @unchecked Sendable {
    private let boundSocket: LoopBound<WebSocket>
    /// The connection. On its loop's thread only (asserted in debug builds).
    var socket: WebSocket { boundSocket.value }
    var loop: EventLoop { boundSocket.loop }
    let id: Int
    /// Set by the loop when the connection closes: the core skips what the
    /// connection still had queued (snapshots nobody will read).
    private let closedFlag = Atomic<Bool>(false)
    var isClosed: Bool { closedFlag.load(ordering: .relaxed) }
    func markClosed() { closedFlag.store(true, ordering: .relaxed) }

    /// Counted in `HubMetrics.unauthenticated` (set by the loop before the
    /// core sees the session, then core thread only).
    var countedUnauthenticated = false

    // Core thread only.
    var slot = -1
    var saidHello = false
    var since: Int64?
    var client: String?
    /// Who the connection acts as: from the upgrade's Authorization header
    /// or hello's token; nil until authenticated.
    var actor: Actor?
    /// Sync health (GET /v1/admin/clients): when it connected, the highest
    /// seq it has been sent or says it applied, its outbox depth as it last
    /// reported, and when it last asked or reported anything.
    var connectedAt: Int64 = 0
    @exclusivity(unchecked) var seenSeq: Int64 = 0  // written per delivery: see `HubCore.batches`
    var outbox: Int64 = 0
    var lastHeardAt: Int64 = 0

    /// On the socket's loop thread.
    init(socket: WebSocket, id: Int, actor: Actor? = nil) {
        self.boundSocket = LoopBound(socket, on: socket.loop)
        self.actor = actor
        self.id = id
    }

    /// No longer counted as unauthenticated: it authenticated or closed.
    func stopWaitingForToken(_ metrics: HubMetrics) {
        guard countedUnauthenticated else { return }
        countedUnauthenticated = false
        metrics.unauthenticated.subtract(1, ordering: .relaxed)
    }
}

/// The `/v1/ws` handler: parses and decodes frames on the loop thread (so
/// both cores parse in parallel) and hands requests to the core in order.
final class SyncHandler: WebSocketHandler {
    private let core: HubCore
    private let limits: JSONLimits
    private let actor: Actor?
    private var session: Session?

    /// `actor`: who the upgrade request's token named, if it had one.
    init(core: HubCore, limits: JSONLimits, actor: Actor?) {
        self.core = core
        self.limits = limits
        self.actor = actor
    }

    func webSocketDidOpen(_ socket: WebSocket) {
        let session = Session(socket: socket, id: core.nextSessionID(), actor: actor)
        if actor == nil, core.configuration.authenticator != nil {
            session.countedUnauthenticated = true
            core.metrics.unauthenticated.add(1, ordering: .relaxed)
        }
        self.session = session
        core.post(from: socket.loop, .open(session))
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        guard let session else { return }
        guard kind == .text else {
            return core.post(from: socket.loop, .refused(session, id: nil, ProtocolError(.binaryNotSupported,
                "binary frames are not part of the protocol; send JSON in text frames")))
        }
        let message: JSONValue
        do {
            message = try JSONValue.parse(payload, limits: limits)
        } catch {
            return core.post(from: socket.loop, .refused(session, id: nil, .badJSON(error)))
        }
        do {
            core.post(from: socket.loop, .request(session, try Request.decode(message)))
        } catch {
            core.post(from: socket.loop, .refused(session, id: Request.id(of: message), error))
        }
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        guard let session else { return }
        self.session = nil
        session.markClosed()
        core.post(from: socket.loop, .close(session))
    }
}
