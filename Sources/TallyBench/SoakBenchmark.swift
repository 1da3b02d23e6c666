@preconcurrency import Glibc
import Dispatch
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// A soak: a fresh hub child under steady mixed load for a long time, its
/// resident memory read as it goes. Writers run records through their
/// stages and orders from received to delivered at a fixed total rate;
/// subscribers follow records and prefixes; reconnecting clients leave
/// every few seconds and resume by seq. Every subscription is checked:
/// pushes in seq order, none repeated, record versions rising by one, and
/// at the end exactly as many as the acknowledged writes made.
///
/// What it answers: does the hub's memory stay flat under load that never
/// stops — `growth in the second half` is the figure.
public struct SoakBenchmark: Sendable {
    public var seconds = 600.0
    public var writers = 20
    /// Writes per second, all writers together.
    public var rate = 840.0
    public var subscribers = 210
    public var reconnecting = 30
    /// Seconds a reconnecting client stays before it leaves and resumes.
    public var reconnectPeriod: ClosedRange<Double> = 5...10
    /// Seconds between table rows; nil: a twentieth of the run, at least 1.
    public var sampleSeconds: Double?
    /// Client event-loop threads.
    public var threads = 1
    /// The hub's --durability.
    public var durability = "full"
    /// Items the orders draw from, and hot records per record writer.
    public var items = 10
    public var hotPerWriter = 5
    /// A hub started elsewhere (under heaptrack, say) instead of a fresh
    /// child: its WebSocket URL and the PID whose memory is read.
    public var hub: (url: String, pid: Int32)?
    public init() {}

    public struct Sample: Sendable {
        public var seconds: Double
        public var rssKiB: Int
        public var writes: Int
        public var pushes: Int
        public var resumes: Int
    }

    public struct Result: Sendable {
        public var samples: [Sample]
        /// Resident memory once every client has gone.
        public var idleRSSKiB: Int?
        public var maxRSSKiB: Int
        public var writes: Int
        public var pushes: Int
        public var resumes: Int
        public var seconds: Double
        public var hubCPUSeconds: Double
        public var problems: SoakProblems

        public var start: Sample { samples[0] }
        /// The sample at half time.
        public var half: Sample { samples.min { abs($0.seconds - seconds / 2) < abs($1.seconds - seconds / 2) }! }
        public var end: Sample { samples[samples.count - 1] }
        public var secondHalfGrowthPercent: Double {
            Double(end.rssKiB - half.rssKiB) * 100 / Double(max(1, half.rssKiB))
        }
        public var writesPerSecond: Double { seconds > 0 ? Double(writes) / seconds : 0 }
        public var errors: Int { problems.total }
    }

    public func run(log: (String) -> Void) throws(FanoutBenchmark.Failure) -> Result {
        let work = makeTemporaryDirectory("tally-soak")
        defer { removeTree(work) }
        let child: BrokerProcess?
        if hub == nil {
            do {
                child = try .tally(dataDirectory: work + "/data", workDirectory: work,
                                   extraArguments: ["--durability", durability])
            } catch { throw .broker(error) }
        } else {
            child = nil
        }
        defer { child?.terminate() }
        let process = Hub(url: hub?.url ?? child!.url, pid: hub?.pid ?? child!.pid)
        // Names and idempotency keys of this run, distinct from an earlier run's on the same hub.
        let tag = String(nanos() % 1_000_000, radix: 36)
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: threads) } catch { throw .connect("\(error)") }
        defer { group.shutdown() }
        var options = WebSocketOptions()
        options.deflate.enabled = false
        let shared = SoakShared()
        let clients = group.loops.map { _ in SoakLoopClients() }
        let hotRecords = max(1, (writers + 1) / 2 * hotPerWriter)

        log("tally pid \(process.pid) at \(process.url): \(items) items, \(subscribers) subscribers, "
            + "\(reconnecting) reconnecting clients, \(writers) writers at \(format(rate, 0)) writes/s for \(format(seconds, 0)) s")
        try makeItems(url: process.url, loop: group.loops[0])
        let subscribers = self.subscribers
        let opened = openConnections(count: subscribers, url: process.url, group: group, options: options) { index, socket in
            let subscription = SoakSubscription(target: .subscriber(index, hotRecords: hotRecords), shared: shared)
            clients[socket.loop.id].subscriptions.append(subscription)
            return SoakConnection(subscription: subscription, client: nil)
        }
        if opened.failed > 0 {
            throw .connect("\(opened.failed) of \(subscribers) subscribers failed: \(opened.firstError.map { "\($0)" } ?? "?")")
        }
        let period = reconnectPeriod, clientOptions = options
        for index in 0..<reconnecting {
            let loop = group.loops[index % group.loops.count]
            let url = process.url
            loop.execute {
                let subscription = SoakSubscription(target: .reconnecting(index, hotRecords: hotRecords), shared: shared)
                let client = SoakReconnectingClient(index: index, subscription: subscription, url: url, loop: loop,
                                                    options: clientOptions, period: period)
                clients[loop.id].subscriptions.append(subscription)
                clients[loop.id].reconnecting.append(client)
                client.connect()
            }
        }
        let everyone = subscribers + reconnecting
        guard waitUntil(seconds: 30 + Double(everyone) / 100, { shared.subscribed.load(ordering: .relaxed) >= everyone }),
              shared.problems.withLock({ $0.total }) == 0 else {
            throw .subscribe("\(shared.subscribed.load(ordering: .relaxed)) of \(everyone) subscriptions answered; "
                + shared.problems.withLock { $0.examples.joined(separator: "; ") })
        }
        let interval = UInt64(1e9 * Double(writers) / rate)
        let writerCount = writers, items = self.items, hotPerWriter = self.hotPerWriter
        let writing = openConnections(count: writers, url: process.url, group: group, options: options) { index, socket in
            let writer = SoakWriter(index: index, tag: tag, hotPerWriter: hotPerWriter, items: items,
                                    interval: interval, shared: shared, socket: socket)
            clients[socket.loop.id].writers.append(writer)
            return writer
        }
        if writing.failed > 0 {
            throw .connect("\(writing.failed) of \(writerCount) writers failed: \(writing.firstError.map { "\($0)" } ?? "?")")
        }
        usleep(200_000)

        // The load, with the driver's clock: ticks pace the writers and the reconnections.
        let cpuBefore = process.cpuSeconds() ?? 0
        let start = nanos()
        for loop in group.loops {
            loop.execute { for writer in clients[loop.id].writers { writer.start(at: start, of: writerCount) } }
        }
        var samples: [Sample] = []
        var maxRSS = 0
        func sample(at time: Double) {
            let rss = process.residentKiB() ?? 0
            maxRSS = max(maxRSS, rss)
            let s = Sample(seconds: time, rssKiB: rss, writes: shared.acknowledged.load(ordering: .relaxed),
                           pushes: shared.pushes.load(ordering: .relaxed), resumes: shared.resumes.load(ordering: .relaxed))
            samples.append(s)
            log("\(format(time, 0)) s: RSS \(format(Double(rss) / 1024, 1)) MiB, \(s.writes) writes, \(s.pushes) pushes, "
                + "\(s.resumes) resumes, \(shared.problems.withLock { $0.total }) errors")
        }
        var pending = sampleTimes()
        var nextRSSRead = start
        while true {
            let now = nanos()
            let elapsed = Double(now - start) / 1e9
            if let next = pending.first, elapsed >= next {
                pending.removeFirst()
                sample(at: next)
                if pending.isEmpty { break }
            } else if now >= nextRSSRead {
                maxRSS = max(maxRSS, process.residentKiB() ?? 0)
                nextRSSRead = now + 1_000_000_000
            }
            for loop in group.loops { loop.execute { clients[loop.id].tick(now: nanos()) } }
            sleep(untilNanos: now + 10_000_000)
        }
        let loadSeconds = Double(nanos() - start) / 1e9
        shared.stopping.store(true, ordering: .relaxed)
        let cpuAfter = process.cpuSeconds() ?? cpuBefore

        // Drain: the last writes are answered, then every subscription must
        // have received exactly what the acknowledged writes made.
        _ = waitUntil(seconds: 20) {
            group.loops.allSatisfy { loop in onLoop(loop) { !clients[loop.id].writers.contains { $0.inFlight } } }
        }
        let streams = shared.streams.withLock { $0 }.mapValues { $0.sorted() }
        func expected(_ stream: SoakStream, after seq: Int64) -> Int {
            guard let seqs = streams[stream] else { return 0 }
            var low = 0, high = seqs.count
            while low < high {
                let mid = (low + high) / 2
                if seqs[mid] <= seq { low = mid + 1 } else { high = mid }
            }
            return seqs.count - low
        }
        func tallies() -> [SubscriptionTally] {
            group.loops.flatMap { loop in
                onLoop(loop) {
                    clients[loop.id].subscriptions.map {
                        SubscriptionTally(target: $0.target, startSeq: $0.startSeq, received: $0.received)
                    }
                }
            }
        }
        _ = waitUntil(seconds: 20) {
            tallies().allSatisfy { t in t.startSeq.map { t.received >= expected(t.target.stream, after: $0) } ?? true }
        }
        for tally in tallies() {
            guard let startSeq = tally.startSeq else {
                shared.fail("never subscribed", "\(tally.target)")
                continue
            }
            let want = expected(tally.target.stream, after: startSeq)
            if tally.received < want { shared.fail("missing pushes", "\(tally.target): \(tally.received) of \(want)") }
            if tally.received > want { shared.fail("extra pushes", "\(tally.target): \(tally.received), expected \(want)") }
        }

        // Everyone leaves; what the hub keeps then is what it holds for nobody.
        shared.closing.store(true, ordering: .relaxed)
        for loop in group.loops {
            loop.execute {
                for writer in clients[loop.id].writers { writer.socket?.close() }
                for client in clients[loop.id].reconnecting { client.socket?.close() }
            }
        }
        for socket in opened.sockets { socket.execute { $0.close() } }
        let connections = subscribers + writerCount + group.loops.reduce(0) { sum, loop in
            sum + onLoop(loop) { clients[loop.id].reconnecting.filter { $0.socket != nil }.count }
        }
        _ = waitUntil(seconds: 10) { shared.closed.load(ordering: .relaxed) >= connections }
        usleep(2_000_000)
        let idle = process.residentKiB()
        return Result(samples: samples, idleRSSKiB: idle, maxRSSKiB: max(maxRSS, idle ?? 0),
                      writes: shared.acknowledged.load(ordering: .relaxed), pushes: shared.pushes.load(ordering: .relaxed),
                      resumes: shared.resumes.load(ordering: .relaxed), seconds: loadSeconds,
                      hubCPUSeconds: cpuAfter - cpuBefore, problems: shared.problems.withLock { $0 })
    }

    /// When rows are taken: every `sampleSeconds`, at half time and at the end.
    func sampleTimes() -> [Double] {
        let step = max(0.5, sampleSeconds ?? max(1, seconds / 20))
        var times = Set<Double>([0, seconds / 2, seconds])
        var t = step
        while t < seconds { times.insert(t); t += step }
        return times.sorted()
    }

    /// The items orders draw from, with stock enough for every delivery.
    private func makeItems(url: String, loop: EventLoop) throws(FanoutBenchmark.Failure) {
        let setup: BlockingWebSocket
        do { setup = try BlockingWebSocket(url: url, loop: loop) } catch { throw .connect("setup: \(error)") }
        defer { setup.close() }
        for item in 0..<items {
            setup.send(.text, Array(#"{"op":"set","name":"items/soak-\#(item)","data":{"name":"soak item \#(item)","stock":1000000000}}"#.utf8))
            guard case .message(_, let reply)? = setup.receive(), reply.starts(with: SoakScan.okPrefix) else {
                throw .connect("setup: the hub did not accept items/soak-\(item)")
            }
        }
    }

    /// The hub under load: where to connect, whose memory and CPU to read.
    struct Hub {
        let url: String
        let pid: Int32
        func residentKiB() -> Int? { TallyBench.residentKiB(pid: pid) }
        func cpuSeconds() -> Double? { processCPUSeconds(pid: pid) }
    }

    struct SubscriptionTally: Sendable {
        var target: SoakTarget
        var startSeq: Int64?
        var received: Int
    }
}

/// Runs `body` on `loop`'s thread and waits for its result.
func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () -> T) -> T {
    let done = DispatchSemaphore(value: 0)
    let box = LockedValueBox<T?>(nil)
    loop.execute {
        let value = body()
        box.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    return box.withLock { $0! }
}
