import Dispatch
import Synchronization
import TallyConcurrency
import TallyNet
import TallyTLS
import TallyWebSocket

/// Opens many idle WebSocket connections to one server and reads the
/// server's resident memory before and after: memory per idle connection.
/// Then checks that a new connection is still answered promptly.
public struct ConnectionsBenchmark: Sendable {
    public var url: String
    public var count = 10_000
    /// The server process to measure (its /proc/PID/status).
    public var serverPID: Int32?
    /// Handshakes in flight at once.
    public var concurrency = 200
    public var options = WebSocketOptions()
    /// Subprotocols to offer (Mosquitto's WebSocket listener wants "mqtt").
    public var subprotocols: [String] = []
    /// For wss:// URLs.
    public var tls: TLSContext?
    public init(url: String) { self.url = url }

    public struct Result: Sendable {
        public var opened: Int
        public var failed: Int
        public var seconds: Double
        public var rssBeforeKiB: Int?
        public var rssAfterKiB: Int?
        public var newConnectionMillis: Double
        /// Round trip of one echo on the new connection (nil when not an echo endpoint).
        public var echoMillis: Double?
        public var bytesPerConnection: Double? {
            guard let before = rssBeforeKiB, let after = rssAfterKiB, opened > 0 else { return nil }
            return Double(after - before) * 1024 / Double(opened)
        }
    }

    public func run(group: EventLoopGroup, progress: @escaping @Sendable (Int) -> Void) throws(ClientError) -> Result {
        // Warm up: the first connections allocate loop-wide structures.
        _ = try openBatch(group: group, count: min(100, count), progress: { _ in })
        Thread.sleepMillis(300)
        let before = serverPID.flatMap(residentKiB)
        let start = nanos()
        let (opened, failed) = try openBatch(group: group, count: count, progress: progress)
        let seconds = Double(nanos() - start) / 1e9
        Thread.sleepMillis(500)
        let after = serverPID.flatMap(residentKiB)

        let probeStart = nanos()
        let probe = try BlockingWebSocket(url: url, loop: group.next(), options: options, tls: tls,
                                          subprotocols: subprotocols)
        let connected = nanos()
        var echoMillis: Double?
        if subprotocols.isEmpty {
            probe.send(.text, Array("still there?".utf8))
            if case .message? = probe.receive(timeoutMillis: 10_000) { echoMillis = Double(nanos() - connected) / 1e6 }
        }
        probe.close()
        return Result(opened: opened, failed: failed, seconds: seconds, rssBeforeKiB: before, rssAfterKiB: after,
                      newConnectionMillis: Double(connected - probeStart) / 1e6, echoMillis: echoMillis)
    }

    /// Opens `count` connections, at most `concurrency` handshakes at a time; they stay open.
    private func openBatch(group: EventLoopGroup, count: Int, progress: @escaping @Sendable (Int) -> Void)
        throws(ClientError) -> (opened: Int, failed: Int) {
        let slots = DispatchSemaphore(value: concurrency)
        let finished = CountdownLatch(count: count)
        let tally = LockedValueBox<(opened: Int, failed: Int, firstError: ClientError?)>((0, 0, nil))
        for _ in 0..<count {
            slots.wait()
            WebSocketClient.connect(to: url, on: group.next(), options: options, tls: tls, subprotocols: subprotocols,
                                    handler: { _ in Idle() }) { result in
                let opened = tally.withLock { t -> Int in
                    switch result {
                    case .success: t.opened += 1
                    case .failure(let error): t.failed += 1; if t.firstError == nil { t.firstError = error }
                    }
                    return t.opened
                }
                if opened % 1000 == 0 { progress(opened) }
                slots.signal()
                finished.countDown()
            }
        }
        finished.wait()
        let t = tally.withLock { $0 }
        if t.opened == 0, let error = t.firstError { throw error }
        return (t.opened, t.failed)
    }

    final class Idle: WebSocketHandler {
        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {}
    }
}

enum Thread {
    static func sleepMillis(_ ms: Int) {
        let semaphore = DispatchSemaphore(value: 0)
        _ = semaphore.wait(timeout: .now() + .milliseconds(ms))
    }
}
