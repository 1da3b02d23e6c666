import Dispatch
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// A loop-confined WebSocket carried to the client's queue; only ever
/// touched again on its loop (`LoopBound` asserts it in debug builds).
struct SocketBox: Sendable {
    private let bound: LoopBound<WebSocket>

    /// On the socket's loop thread.
    init(socket: WebSocket) {
        bound = LoopBound(socket, on: socket.loop)
    }

    func send(_ bytes: [UInt8]) {
        bound.execute { $0.send(.text, bytes) }
    }

    func close() {
        bound.execute { $0.close(.normal, reason: "") }
    }
}

/// What the loop thread hands to the client's queue.
enum InboxItem: Sendable {
    case message([UInt8])
    case closed(WebSocketCloseCode, String)
}

/// Messages from the loop thread, drained on the client's queue in bursts:
/// everything that arrived since the last drain is handled in one queue
/// task, so a flood of pushes becomes a few batches instead of one task
/// (and one store transaction downstream) per message.
final class Inbox: Sendable {
    private let pending = Mailbox<InboxItem>()
    private let queue: DispatchQueue
    private let drain: @Sendable ([InboxItem]) -> Void

    init(queue: DispatchQueue, drain: @escaping @Sendable ([InboxItem]) -> Void) {
        self.queue = queue
        self.drain = drain
    }

    func post(_ item: InboxItem) {
        // The first item after a drain schedules the next one; later items
        // ride along with it.
        guard pending.post(item) else { return }
        queue.async { [self] in
            var items: [InboxItem] = []
            guard pending.takeAll(into: &items) else { return }
            drain(items)
        }
    }
}

/// The connection's handler on its loop thread: forwards to the inbox.
final class SocketBridge: WebSocketHandler {
    let inbox: Inbox
    init(inbox: Inbox) { self.inbox = inbox }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        inbox.post(.message(payload))
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        inbox.post(.closed(code, reason))
    }
}
