import Dispatch
import Synchronization
import TallyConcurrency
import TallyNet
import TallyTLS
import TallyWebSocket

/// Echo round trips: each connection sends a message, waits for the echo,
/// sends the next. Reports round-trip latency and messages per second.
public struct EchoBenchmark: Sendable {
    public var url: String
    public var connections = 10
    public var messagesPerConnection = 10_000
    public var size = 64
    public var options = WebSocketOptions()
    public var tls: TLSContext?
    public init(url: String) { self.url = url }

    public struct Result: Sendable {
        public var messages: Int
        public var seconds: Double
        public var latency: LatencySummary
        public var messagesPerSecond: Double { Double(messages) / seconds }
    }

    public func run(group: EventLoopGroup) throws(ClientError) -> Result {
        let done = CountdownLatch(count: connections)
        let samples = LockedValueBox<[UInt64]>([])
        let failure = LockedValueBox<ClientError?>(nil)
        let payload = EchoCheck.payload(kind: .binary, size: size)
        let count = messagesPerConnection
        let start = nanos()
        for _ in 0..<connections {
            WebSocketClient.connect(to: url, on: group.next(), options: options, tls: tls, handler: { _ in
                PingPong(payload: payload, count: count) { latencies in
                    samples.withLock { $0.append(contentsOf: latencies) }
                    done.countDown()
                }
            }) { result in
                if case .failure(let error) = result {
                    failure.withLock { $0 = error }
                    done.countDown()
                }
            }
        }
        done.wait()
        let seconds = Double(nanos() - start) / 1e9
        if let error = failure.withLock({ $0 }) { throw error }
        let all = samples.withLock { $0 }
        return Result(messages: all.count, seconds: seconds, latency: LatencySummary(all))
    }

    /// One connection's ping-pong, on its loop thread.
    final class PingPong: WebSocketHandler {
        let payload: [UInt8]
        var remaining: Int
        var sentAt: UInt64 = 0
        var latencies: [UInt64] = []
        let finished: ([UInt64]) -> Void

        init(payload: [UInt8], count: Int, finished: @escaping ([UInt64]) -> Void) {
            self.payload = payload
            self.remaining = count
            self.finished = finished
            latencies.reserveCapacity(count)
        }

        func webSocketDidOpen(_ socket: WebSocket) { sendNext(socket) }

        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ message: [UInt8]) {
            latencies.append(nanos() - sentAt)
            remaining -= 1
            if remaining > 0 {
                sendNext(socket)
            } else {
                socket.close()
                finished(latencies)
            }
        }

        func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
            if remaining > 0 {
                remaining = 0
                finished(latencies)
            }
        }

        private func sendNext(_ socket: WebSocket) {
            sentAt = nanos()
            socket.send(.binary, payload)
        }
    }
}

