@preconcurrency import Glibc
import Dispatch
import Synchronization
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// Start-up with a large store: fills a store with N records through a hub
/// child (atomic `write` batches from a few connections), stops it with
/// SIGTERM, then times `tally serve` on that store from exec to its
/// "listening" line and to the first answered `get` of a random record.
/// With `kind = .orders` the store holds finished orders instead (created
/// and advanced to delivered through the workflow), and each start also
/// times its first order creation, the first write that needs the
/// workflow's stats.
public struct BrokerStartupBenchmark: Sendable {
    public enum Kind: String, Sendable {
        /// Plain records `bench/s/{i}`.
        case records
        /// Finished orders `orders/s{i}`.
        case orders
    }

    public var kind = Kind.records
    public var records = 1_000_000
    /// Sets per atomic `write` (the protocol allows at most 1000).
    public var batch = 1000
    /// Connections filling the store, each with one batch in flight.
    public var connections = 4
    /// Timed starts; the median is reported.
    public var starts = 3
    /// The hub's --durability while filling (the timed starts use the default).
    public var fillDurability = "full"
    public init() {}

    public struct Start: Sendable {
        /// exec → "tally listening on …" on stdout.
        public var listeningSeconds: Double
        /// exec → the reply to the first `get` (connection included).
        public var firstGetSeconds: Double
        /// exec → the reply to the first order creation, after the get
        /// (`kind == .orders` only).
        public var firstOrderSeconds: Double?
        public var rssKiB: Int?
    }

    public struct Result: Sendable {
        public var records: Int
        public var fillSeconds: Double
        public var fillCPUSeconds: Double
        public var storeBytes: Int
        public var starts: [Start]
        public var medianListening: Double { median(starts.map(\.listeningSeconds)) }
        public var medianFirstGet: Double { median(starts.map(\.firstGetSeconds)) }
        public var medianFirstOrder: Double? {
            let orders = starts.compactMap(\.firstOrderSeconds)
            return orders.isEmpty ? nil : median(orders)
        }
        func median(_ values: [Double]) -> Double {
            let sorted = values.sorted()
            return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        }
    }

    public func run(log: (String) -> Void) throws(FanoutBenchmark.Failure) -> Result {
        let work = makeTemporaryDirectory("tally-startup")
        defer { removeTree(work) }
        let data = work + "/data"
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: 1) } catch { throw .connect("\(error)") }
        defer { group.shutdown() }

        // Fill.
        let filler: BrokerProcess
        do {
            filler = try .tally(dataDirectory: data, workDirectory: work, extraArguments: ["--durability", fillDurability])
        } catch { throw .broker(error) }
        var options = WebSocketOptions()
        options.deflate.enabled = false
        let fillSeconds: Double, fillCPU: Double, written: Int
        switch kind {
        case .records:
            log("filling \(records) records through pid \(filler.pid) (\(connections) connections, \(batch) sets per write)")
            (fillSeconds, fillCPU, written) = try fillRecords(filler, group: group, options: options, log: log)
        case .orders:
            log("filling \(records) finished orders through pid \(filler.pid) (\(connections) connections, \(batch) orders per write)")
            (fillSeconds, fillCPU, written) = try fillOrders(filler, group: group, log: log)
        }
        usleep(100_000)
        let status = filler.terminate(graceSeconds: 120)
        log("filled \(written) records in \(format(fillSeconds, 1)) s; the hub exited with status \(status)")
        let storeBytes = directoryBytes(data)

        // Timed starts.
        var results: [Start] = []
        var random = XorShift(seed: UInt64(nanos()))
        for run in 1...max(1, starts) {
            let t0 = nanos()
            let hub: BrokerProcess
            do { hub = try .tally(dataDirectory: data, workDirectory: work) } catch { throw .broker(error) }
            let listening = hub.readyNanos
            let picked = random.next(below: max(1, written))
            let name = kind == .orders ? "orders/s\(picked)" : "bench/s/\(picked)"
            var gotSeconds = Double.nan
            var orderSeconds: Double?
            do {
                let socket = try BlockingWebSocket(url: hub.url, loop: group.next(), options: options)
                socket.send(.text, Array(#"{"op":"get","name":"\#(name)"}"#.utf8))
                if case .message(_, let reply)? = socket.receive(timeoutMillis: 60_000) {
                    gotSeconds = Double(nanos() - t0) / 1e9
                    if !reply.starts(with: Array(#"{"ok":true"#.utf8)) {
                        log("  get \(name) answered: \(String(decoding: reply.prefix(200), as: UTF8.self))")
                    }
                }
                if kind == .orders {
                    socket.send(.text, Array(HistoryRequests.createOp("orders/start\(run)").utf8))
                    if case .message(_, let reply)? = socket.receive(timeoutMillis: 600_000) {
                        orderSeconds = Double(nanos() - t0) / 1e9
                        if !reply.starts(with: Array(#"{"ok":true"#.utf8)) {
                            log("  the first order answered: \(String(decoding: reply.prefix(200), as: UTF8.self))")
                        }
                    }
                }
                socket.close()
            } catch {
                log("  start \(run): cannot connect: \(error)")
            }
            let rss = hub.residentKiB()
            hub.terminate(graceSeconds: 60)
            results.append(Start(listeningSeconds: Double(listening) / 1e9, firstGetSeconds: gotSeconds,
                                 firstOrderSeconds: orderSeconds, rssKiB: rss))
            log("  start \(run): listening after \(format(Double(listening) / 1e6, 1)) ms, first get after \(format(gotSeconds * 1000, 1)) ms"
                + (orderSeconds.map { ", first order after \(format($0 * 1000, 1)) ms" } ?? ""))
        }
        return Result(records: written, fillSeconds: fillSeconds, fillCPUSeconds: fillCPU, storeBytes: storeBytes,
                      starts: results)
    }

    /// Plain records through `connections` connections, one batch of
    /// `batch` sets in flight on each: (seconds, hub CPU seconds, records).
    private func fillRecords(_ filler: BrokerProcess, group: EventLoopGroup, options: WebSocketOptions,
                             log: (String) -> Void) throws(FanoutBenchmark.Failure) -> (Double, Double, Int) {
        let state = FillState(total: records, batch: batch)
        let cpuBefore = filler.cpuSeconds() ?? 0
        let start = nanos()
        let opened = openConnections(count: connections, url: filler.url, group: group, options: options) { _, _ in
            FillWriter(state: state)
        }
        if opened.failed > 0 {
            filler.terminate()
            throw .connect("\(opened.failed) filler connections failed: \(opened.firstError.map { "\($0)" } ?? "?")")
        }
        var lastReport = nanos()
        while state.finished.load(ordering: .relaxed) < opened.sockets.count {
            usleep(20_000)
            if nanos() - lastReport > 5_000_000_000 {
                lastReport = nanos()
                log("  \(state.written.load(ordering: .relaxed)) written")
            }
        }
        let seconds = Double(nanos() - start) / 1e9
        let cpu = (filler.cpuSeconds() ?? cpuBefore) - cpuBefore
        for socket in opened.sockets { socket.execute { $0.close() } }
        if let error = state.firstError.withLock({ $0 }) {
            filler.terminate()
            throw .subscribe("a fill batch failed: \(error)")
        }
        return (seconds, cpu, state.written.load(ordering: .relaxed))
    }

    /// Finished orders, as `tally bench history` fills them (created, then
    /// advanced stage by stage to delivered, `batch` orders per write).
    private func fillOrders(_ filler: BrokerProcess, group: EventLoopGroup,
                            log: (String) -> Void) throws(FanoutBenchmark.Failure) -> (Double, Double, Int) {
        let pool: ClientPool
        do { pool = try ClientPool.open(count: connections, url: filler.url, group: group) } catch {
            filler.terminate()
            throw error
        }
        defer { pool.close() }
        let item = ScriptJob(messages: [Array(#"{"op":"set","name":"\#(HistoryRequests.item)","data":{"stock":0}}"#.utf8)])
        _ = pool.run(seconds: nil, window: 1) { $0 == 0 ? item : ScriptJob(messages: []) }
        let progress = FillProgress(total: records, batch: batch)
        let cpuBefore = filler.cpuSeconds() ?? 0
        let start = nanos()
        let fill = pool.run(seconds: nil, window: 1) { _ in OrderFillJob(progress: progress, prefix: "s") }
        let seconds = Double(nanos() - start) / 1e9
        let cpu = (filler.cpuSeconds() ?? cpuBefore) - cpuBefore
        let written = progress.done.load(ordering: .relaxed)
        guard written == records else {
            filler.terminate()
            throw .subscribe("filling orders stopped at \(written): \(fill.firstError ?? "?")")
        }
        return (seconds, cpu, written)
    }

    final class FillState: Sendable {
        let total: Int
        let batch: Int
        let nextBatch = Atomic<Int>(0)
        let written = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let firstError = LockedValueBox<String?>(nil)
        init(total: Int, batch: Int) {
            self.total = total
            self.batch = batch
        }
    }

    /// One filling connection: takes the next batch, sends it as one atomic
    /// `write`, waits for the reply, repeats.
    final class FillWriter: WebSocketHandler {
        let state: FillState
        var pending = 0
        var done = false
        init(state: FillState) { self.state = state }

        func webSocketDidOpen(_ socket: WebSocket) { sendNext(socket) }

        func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
            if payload.starts(with: Array(#"{"ok":true"#.utf8)) {
                state.written.add(pending, ordering: .relaxed)
                sendNext(socket)
            } else {
                state.firstError.withLock { if $0 == nil { $0 = String(decoding: payload.prefix(300), as: UTF8.self) } }
                finish()
            }
        }

        func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) { finish() }

        private func finish() {
            guard !done else { return }
            done = true
            state.finished.add(1, ordering: .relaxed)
        }

        private func sendNext(_ socket: WebSocket) {
            let first = state.nextBatch.add(1, ordering: .relaxed).oldValue * state.batch
            guard first < state.total else { return finish() }
            let last = min(state.total, first + state.batch)
            var message = Array(#"{"op":"write","ops":["#.utf8)
            message.reserveCapacity(80 * (last - first) + 32)
            for i in first..<last {
                if i > first { message.append(UInt8(ascii: ",")) }
                message.append(contentsOf: #"{"op":"set","name":"bench/s/\#(i)","data":{"n":\#(i),"v":"abcdefgh"}}"#.utf8)
            }
            message.append(contentsOf: "]}".utf8)
            pending = last - first
            socket.send(.text, message)
        }
    }
}
