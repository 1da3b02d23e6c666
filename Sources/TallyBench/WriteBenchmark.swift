@preconcurrency import Glibc
import Dispatch
import Synchronization
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// Durable writes: W writer connections, each in a closed loop (send a `set`,
/// wait for its acknowledgement, send the next), against a Tally hub child
/// with a fresh store. Reports acknowledged writes per second, the
/// acknowledgement latency and the hub's CPU time per write.
public struct WriteBenchmark: Sendable {
    public var writers = 10
    public var seconds = 10.0
    /// `full`, `normal` or `off` (the hub's --durability).
    public var durability = "full"
    /// nil: writer w cycles over its own `namesPerWriter` records
    /// `bench/w{w}/{k}`. N: every write goes to a random one of N records
    /// `bench/k{i}` shared by all writers.
    public var records: Int?
    public var namesPerWriter = 1000
    /// Client event-loop threads.
    public var threads = 1
    /// A PostgreSQL store (`tally serve --store`) instead of SQLite in the
    /// data directory; the database may hold earlier runs' records.
    public var store: String?
    /// Hub children on `store`, the writers spread over them in turn (one
    /// unless there is a shared store).
    public var hubs = 1
    public init() {}

    /// The store as the report names it.
    var storeLabel: String {
        guard store != nil else { return "sqlite" }
        return hubs == 1 ? "postgres" : "postgres, \(hubs) hubs"
    }

    public struct Result: Sendable {
        public var writers: Int
        public var durability: String
        public var records: Int?
        public var acknowledged: Int
        public var errors: Int
        public var seconds: Double
        public var latency: LatencySummary
        public var hubCPUSeconds: Double
        /// Storage transactions in the window (from the hub's /metrics).
        public var commits: Int?
        public var commitSeconds: Double?
        public var writesPerSecond: Double { Double(acknowledged) / seconds }
        public var cpuMicrosPerWrite: Double { acknowledged == 0 ? .nan : hubCPUSeconds * 1e6 / Double(acknowledged) }
    }

    public func run(log: (String) -> Void) throws(FanoutBenchmark.Failure) -> Result {
        let work = makeTemporaryDirectory("tally-writes")
        defer { removeTree(work) }
        var processes: [BrokerProcess] = []
        defer { for process in processes { _ = process.terminate() } }
        for hub in 0..<max(1, hubs) {
            let directory = work + "/hub\(hub)"
            mkdir(directory, 0o700)
            do {
                processes.append(try .tally(dataDirectory: directory + "/data", workDirectory: directory,
                                            extraArguments: ["--durability", durability]
                                                + (store.map { ["--store", $0] } ?? [])))
            } catch { throw .broker(error) }
        }
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: threads) } catch { throw .connect("\(error)") }
        defer { group.shutdown() }

        var options = WebSocketOptions()
        options.deflate.enabled = false
        let state = WriteState()
        let records = self.records, namesPerWriter = self.namesPerWriter
        log("tally pid \(processes.map { String($0.pid) }.joined(separator: ",")) on port "
            + "\(processes.map { String($0.port) }.joined(separator: ",")), \(storeLabel), durability \(durability): "
            + "opening \(writers) writers")
        var sockets: [LoopBound<WebSocket>] = []
        for (hub, process) in processes.enumerated() {
            // Writer w goes to hub w mod hubs.
            let here = (0..<writers).filter { $0 % processes.count == hub }
            guard !here.isEmpty else { continue }
            let opened = openConnections(count: here.count, url: process.url, group: group, options: options) { index, socket in
                let writer = Writer(index: here[index], state: state, records: records, namesPerWriter: namesPerWriter,
                                    socket: socket)
                state.writers.withLock { $0.append((LoopBound(writer, on: socket.loop), socket.loop)) }
                return writer
            }
            if opened.failed > 0 {
                throw .connect("\(opened.failed) of \(here.count) connections failed: \(opened.firstError.map { "\($0)" } ?? "?")")
            }
            sockets += opened.sockets
        }
        usleep(200_000)

        let metricsBefore = processes.map { httpGet(port: $0.port, path: "/metrics") }
        let cpuBefore = processes.map { $0.cpuSeconds() ?? 0 }.reduce(0, +)
        let start = nanos()
        let end = start + UInt64(seconds * 1e9)
        state.end.store(end, ordering: .relaxed)
        for (writer, loop) in state.writers.withLock({ $0 }) {
            loop.execute { writer.value.start() }
        }
        sleep(untilNanos: end)
        let cpuAfter = processes.map { $0.cpuSeconds() ?? 0 }.reduce(0, +)
        let metricsAfter = processes.map { httpGet(port: $0.port, path: "/metrics") }
        // Writes in flight at the end are answered but not counted.
        _ = waitUntil(seconds: 10) { state.finished.load(ordering: .relaxed) >= sockets.count }
        for socket in sockets { socket.execute { $0.close() } }
        _ = waitUntil(seconds: 10) { state.closed.load(ordering: .relaxed) >= sockets.count }
        if let error = state.firstError.withLock({ $0 }) { log("first error reply: \(error)") }

        // Summed over the hubs.
        var commits: Int?, commitSeconds: Double?
        for (before, after) in zip(metricsBefore, metricsAfter) {
            guard let before, let after, let c0 = prometheusValue(before, "tally_commits_total"),
                  let c1 = prometheusValue(after, "tally_commits_total") else { continue }
            commits = (commits ?? 0) + Int(c1 - c0)
            if let s0 = prometheusValue(before, "tally_commit_latency_seconds_sum"),
               let s1 = prometheusValue(after, "tally_commit_latency_seconds_sum") {
                commitSeconds = (commitSeconds ?? 0) + s1 - s0
            }
        }
        let samples = state.latencies.withLock { $0 }
        return Result(writers: writers, durability: durability, records: records,
                      acknowledged: state.acknowledged.load(ordering: .relaxed),
                      errors: state.errors.load(ordering: .relaxed), seconds: seconds,
                      latency: LatencySummary(samples.flatMap { $0 }), hubCPUSeconds: cpuAfter - cpuBefore,
                      commits: commits, commitSeconds: commitSeconds)
    }

    final class WriteState: Sendable {
        let end = Atomic<UInt64>(UInt64.max)
        let acknowledged = Atomic<Int>(0)
        let errors = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let closed = Atomic<Int>(0)
        let latencies = LockedValueBox<[[UInt64]]>([])
        let firstError = LockedValueBox<String?>(nil)
        let writers = LockedValueBox<[(LoopBound<Writer>, EventLoop)]>([])
    }

    /// One writer: a closed loop on its connection's loop thread.
    final class Writer: WebSocketHandler {
        let index: Int
        let state: WriteState
        let records: Int?
        let namesPerWriter: Int
        var random: XorShift
        var k = 0
        var sentAt: UInt64 = 0
        var inFlight = false
        var done = false
        var latencies: [UInt64] = []
        let prefix: [UInt8]
        /// Strong until the close (then released, ending the cycle through the connection).
        var socket: WebSocket?

        init(index: Int, state: WriteState, records: Int?, namesPerWriter: Int, socket: WebSocket) {
            self.socket = socket
            self.index = index
            self.state = state
            self.records = records
            self.namesPerWriter = namesPerWriter
            random = XorShift(seed: UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15)
            prefix = Array(#"{"op":"set","name":"bench/"#.utf8)
            latencies.reserveCapacity(1 << 16)
        }

        func start() { if let socket { sendNext(socket) } }

        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
            guard inFlight else { return }
            inFlight = false
            let now = nanos()
            if now <= state.end.load(ordering: .relaxed) {
                if payload.starts(with: Array(#"{"ok":true"#.utf8)) {
                    latencies.append(now - sentAt)
                    state.acknowledged.add(1, ordering: .relaxed)
                } else {
                    state.errors.add(1, ordering: .relaxed)
                    state.firstError.withLock { if $0 == nil { $0 = String(decoding: payload.prefix(300), as: UTF8.self) } }
                }
                sendNext(socket)
            } else {
                finish()
            }
        }

        private func sendNext(_ socket: WebSocket) {
            var message = prefix
            if let records {
                message.append(contentsOf: "k\(random.next(below: records))".utf8)
            } else {
                message.append(contentsOf: "w\(index)/\(k)".utf8)
                k = (k + 1) % namesPerWriter
            }
            message.append(contentsOf: #"","data":{"n":\#(k),"v":"abcdefgh"}}"#.utf8)
            inFlight = true
            sentAt = nanos()
            if !socket.send(.text, message) { finish() }
        }

        private func finish() {
            guard !done else { return }
            done = true
            let mine = latencies
            latencies = []
            state.latencies.withLock { $0.append(mine) }
            state.finished.add(1, ordering: .relaxed)
        }

        func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
            self.socket = nil
            finish()
            state.closed.add(1, ordering: .relaxed)
        }
    }
}
