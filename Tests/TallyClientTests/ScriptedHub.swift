import TallyHTTP
import TallyHubTestSupport
import TallyNet
import TallyProtocol
import TallyWebSocket

/// A WebSocket endpoint on 127.0.0.1 (port 0) that answers each request as
/// the test says: for what a real hub does not do on demand — answer
/// `unavailable` (its database out of reach), or drop the connection with
/// a request unanswered.
final class ScriptedHub {
    enum Answer: Sendable {
        /// The reply (its `id` is set to the request's).
        case reply(JSONObject)
        /// Close the connection (1001) without answering.
        case close
    }

    private let server: Server
    /// Every request received, in order.
    let received = Recorder<JSONObject>()

    var url: String { "ws://127.0.0.1:\(server.port)/v1/ws" }

    init(_ answer: @escaping @Sendable (JSONObject) -> Answer) throws {
        server = try Server(configuration: .forTests(threads: 1, shutdownGraceMillis: 500),
                            application: Endpoint(answer: answer, received: received))
    }

    deinit { server.shutdown() }

    private struct Endpoint: HTTPApplication {
        let answer: @Sendable (JSONObject) -> Answer
        let received: Recorder<JSONObject>

        func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction {
            let (answer, received) = (answer, received)
            return .upgrade(WebSocketRoute(subprotocols: ["tally.v1"]) { _ in Script(answer: answer, received: received) })
        }
    }

    private final class Script: WebSocketHandler {
        let answer: @Sendable (JSONObject) -> Answer
        let received: Recorder<JSONObject>

        init(answer: @escaping @Sendable (JSONObject) -> Answer, received: Recorder<JSONObject>) {
            (self.answer, self.received) = (answer, received)
        }

        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
            guard case .object(let request)? = try? JSONValue.parse(payload) else { return }
            received.append(request)
            switch answer(request) {
            case .reply(var reply):
                reply["id"] = request["id"]
                socket.send(text: JSONValue.object(reply).serializedString)
            case .close:
                socket.close(.goingAway, reason: "scripted")
            }
        }
    }
}
