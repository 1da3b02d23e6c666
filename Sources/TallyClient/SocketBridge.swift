import Dispatch
import TallyNet
import TallyWebSocket

/// A loop-confined WebSocket carried to the client's queue; only ever
/// touched again on its loop (`loop.execute`).
struct SocketBox: @unchecked Sendable {
    let socket: WebSocket

    func send(_ bytes: [UInt8]) {
        let socket = self.socket
        let box = SocketBox(socket: socket)
        socket.loop.execute { box.socket.send(.text, bytes) }
    }

    func close() {
        let box = self
        socket.loop.execute { box.socket.close(.normal, reason: "") }
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
    private let pending = Locked<(items: [InboxItem], scheduled: Bool)>(([], false))
    private let queue: DispatchQueue
    private let drain: @Sendable ([InboxItem]) -> Void

    init(queue: DispatchQueue, drain: @escaping @Sendable ([InboxItem]) -> Void) {
        self.queue = queue
        self.drain = drain
    }

    func post(_ item: InboxItem) {
        let schedule = pending.withLock { state -> Bool in
            state.items.append(item)
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        guard schedule else { return }
        queue.async { [self] in
            let items = pending.withLock { state -> [InboxItem] in
                let items = state.items
                state.items = []
                state.scheduled = false
                return items
            }
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
