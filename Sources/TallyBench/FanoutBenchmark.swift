@preconcurrency import Glibc
import Dispatch
import Synchronization
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// Fan-out: S subscribers on one broker, one publisher sending U updates a
/// second for D seconds; every subscriber timestamps what it receives.
///
/// The broker runs as a child process (a Tally hub, or Mosquitto as the
/// baseline) so its CPU time can be read from /proc: the client shares the
/// machine's cores, so CPU per delivered message is the fair comparison,
/// not throughput.
public struct FanoutBenchmark: Sendable {
    public enum Mode: String, Sendable, CaseIterable {
        /// Tally: `publish` to a topic every subscriber follows. Mosquitto: PUBLISH to `bench`.
        case events
        /// Tally: `set` of one record every subscriber follows (durable, a
        /// change push). Mosquitto: retained PUBLISH to `bench`.
        case records
        /// Tally: each subscriber follows its own record `bench/r{i}`; the
        /// publisher rotates over them (one delivery per write). Mosquitto:
        /// topic `bench/r{i}` per subscriber, retained PUBLISH.
        case recordPerSub = "record-per-sub"
    }

    public var broker: BrokerProcess.Kind
    public var mode: Mode
    public var subscribers = 100
    /// Updates per second.
    public var rate = 100
    public var seconds = 10.0
    /// How long after the last update late messages still count.
    public var drainSeconds = 2.0
    /// Seconds the broker's idle CPU is measured before publishing.
    public var idleSeconds = 1.0
    /// Client event-loop threads for the subscribers (the publisher has its own).
    public var threads = 1
    /// Offer permessage-deflate (browsers do; pushes are then compressed per connection).
    public var compression = false
    /// The Tally hub's --durability (full, normal or off).
    public var durability = "full"
    /// Tally on a PostgreSQL store (`--store`) instead of SQLite.
    public var store: String?
    /// With `store`: the subscribers on a second hub on the same store, so
    /// every update crosses from the publisher's hub to theirs (the CPU
    /// figures are both hubs').
    public var crossHub = false
    /// A Tally hub already running to measure instead of a fresh child (it
    /// is left running; `AnalysisFanoutBenchmark` measures one hub idle and
    /// busy).
    public var hub: BrokerProcess?
    public init(broker: BrokerProcess.Kind, mode: Mode) {
        self.broker = broker
        self.mode = mode
    }

    public struct Result: Sendable {
        public var broker: BrokerProcess.Kind
        public var mode: Mode
        public var subscribers: Int
        public var rate: Int
        public var updates: Int
        public var expected: Int
        public var delivered: Int
        public var late: Int
        public var latency: LatencySummary
        /// Broker CPU (user + system) from the first update to the end of the drain.
        public var brokerCPUSeconds: Double
        /// Seconds the publishing actually took (pacing overruns show here).
        public var publishSeconds: Double
        public var publisherErrors: Int
        public var unparsed: Int
        public var droppedConnections: Int
        public var brokerRSSKiB: Int?
        /// The broker's CPU use with every subscriber connected and nothing published (cores, 0…).
        public var idleCPU: Double
        /// Every latency sample (nanoseconds), for pooling rounds.
        public var latencySamples: [UInt64] = []
        public var lossPercent: Double { expected == 0 ? 0 : Double(expected - delivered) * 100 / Double(expected) }
        public var cpuMicrosPerDelivery: Double { delivered == 0 ? .nan : brokerCPUSeconds * 1e6 / Double(delivered) }
    }

    /// Rounds of one broker taken as one run: counts, CPU and times summed,
    /// latencies pooled, idle CPU averaged. Rounds of several brokers
    /// alternated within one invocation share the machine's slow drifts,
    /// which one long run of each, one after the other, does not.
    public static func pooled(_ rounds: [Result]) -> Result? {
        guard var total = rounds.first else { return nil }
        for r in rounds.dropFirst() {
            total.updates += r.updates
            total.expected += r.expected
            total.delivered += r.delivered
            total.late += r.late
            total.brokerCPUSeconds += r.brokerCPUSeconds
            total.publishSeconds += r.publishSeconds
            total.publisherErrors += r.publisherErrors
            total.unparsed += r.unparsed
            total.droppedConnections += r.droppedConnections
            total.brokerRSSKiB = [total.brokerRSSKiB, r.brokerRSSKiB].compactMap { $0 }.max()
            total.latencySamples += r.latencySamples
        }
        total.idleCPU = rounds.map(\.idleCPU).reduce(0, +) / Double(rounds.count)
        total.latency = LatencySummary(total.latencySamples)
        return total
    }

    public enum Failure: Error, CustomStringConvertible {
        case broker(BrokerProcess.Failure)
        case connect(String)
        case subscribe(String)
        public var description: String {
            switch self {
            case .broker(let f): f.description
            case .connect(let m): "connecting failed: \(m)"
            case .subscribe(let m): "subscribing failed: \(m)"
            }
        }
    }

    public func run(log: (String) -> Void) throws(Failure) -> Result {
        let work = makeTemporaryDirectory("tally-fanout")
        defer { removeTree(work) }
        let process: BrokerProcess
        // The hub the subscribers use: `process`, or a second one on its store.
        var subscriberHub: BrokerProcess?
        let arguments = ["--durability", durability] + (store.map { ["--store", $0] } ?? [])
        do {
            switch broker {
            case .tally where hub != nil: process = hub!
            case .tally: process = try .tally(dataDirectory: work + "/data", workDirectory: work, extraArguments: arguments)
            case .mosquitto: process = try .mosquitto(workDirectory: work)
            }
        } catch { throw .broker(error) }
        if broker == .tally, crossHub, store != nil {
            let other = work + "/second"
            mkdir(other, 0o700)
            do {
                subscriberHub = try .tally(dataDirectory: other + "/data", workDirectory: other, extraArguments: arguments)
            } catch {
                process.terminate()
                throw .broker(error)
            }
        }
        defer {
            if hub == nil { process.terminate() }
            subscriberHub?.terminate()
        }
        let hubs = [process] + (subscriberHub.map { [$0] } ?? [])
        func cpuSeconds() -> Double? {
            let each = hubs.compactMap { $0.cpuSeconds() }
            return each.count == hubs.count ? each.reduce(0, +) : nil
        }

        var options = WebSocketOptions()
        options.deflate.enabled = compression
        let subprotocols = broker == .mosquitto ? ["mqtt"] : []
        let state = FanoutState()
        let group: EventLoopGroup, publisherGroup: EventLoopGroup
        do {
            group = try EventLoopGroup(threads: threads)
            publisherGroup = try EventLoopGroup(threads: 1)
        } catch { throw .connect("\(error)") }
        defer { group.shutdown(); publisherGroup.shutdown() }

        // Subscribers: connect, subscribe, wait for every acknowledgement.
        let broker = self.broker, mode = self.mode
        log("\(broker.rawValue) pid \(process.pid) on port \(process.port): opening \(subscribers) subscribers")
        let opened = openConnections(count: subscribers, url: (subscriberHub ?? process).url, group: group, options: options,
                                     subprotocols: subprotocols) { index, _ in
            FanoutSubscriber(state: state, hello: Self.subscribeMessages(broker: broker, mode: mode, index: index))
        }
        if opened.failed > 0 {
            throw .connect("\(opened.failed) of \(subscribers) connections failed: \(opened.firstError.map { "\($0)" } ?? "?")")
        }
        let subscribed = waitUntil(seconds: 30 + Double(subscribers) / 100) {
            state.acked.load(ordering: .relaxed) + state.refused.load(ordering: .relaxed) >= subscribers
        }
        if let error = state.firstError.withLock({ $0 }) { throw .subscribe(error) }
        guard subscribed else {
            throw .subscribe("only \(state.acked.load(ordering: .relaxed)) of \(subscribers) subscriptions acknowledged")
        }

        // The publisher, on its own loop so its timestamps are not delayed by the subscribers' work.
        let publisherBox = LockedValueBox<LoopBound<FanoutPublisher>?>(nil)
        let publisherState = FanoutPublisher.Shared()
        let pub = openConnections(count: 1, url: process.url, group: publisherGroup, options: options,
                                  subprotocols: subprotocols) { _, socket in
            let publisher = FanoutPublisher(broker: broker, mode: mode, subscribers: subscribers, shared: publisherState)
            publisherBox.withLock { $0 = LoopBound(publisher, on: socket.loop) }
            return publisher
        }
        guard let publisherSocket = pub.sockets.first, let publisher = publisherBox.withLock({ $0 }) else {
            throw .connect("publisher: \(pub.firstError.map { "\($0)" } ?? "?")")
        }
        guard waitUntil(seconds: 10, { publisherState.ready.load(ordering: .acquiring) }) else {
            throw .connect("the publisher's MQTT CONNECT was not acknowledged")
        }
        usleep(200_000)   // let the handshakes' work settle before measuring
        // The broker's CPU while the subscribers sit idle (timers, keep-alive
        // work): a floor under every per-message figure.
        let idleStart = nanos(), idleCPUBefore = cpuSeconds() ?? 0
        sleep(untilNanos: idleStart + UInt64(idleSeconds * 1e9))
        let idleCPU = ((cpuSeconds() ?? idleCPUBefore) - idleCPUBefore) / (Double(nanos() - idleStart) / 1e9)

        let updates = max(1, Int((Double(rate) * seconds).rounded()))
        let expected = mode == .recordPerSub ? updates : updates * subscribers
        log("publishing \(updates) updates at \(rate)/s to \(subscribers) subscribers (\(mode.rawValue))")
        let interval = 1e9 / Double(rate)
        let loop = publisherSocket.loop
        let cpuBefore = cpuSeconds() ?? 0
        let start = nanos() + 1_000_000
        for i in 0..<updates {
            sleep(untilNanos: start + UInt64(Double(i) * interval))
            loop.execute { publisher.value.publish(publisherSocket.value, number: i) }
        }
        let publishEnd = nanos()
        let deadline = publishEnd + UInt64(drainSeconds * 1e9)
        state.deadline.store(deadline, ordering: .relaxed)
        _ = waitUntil(seconds: drainSeconds) { state.delivered.load(ordering: .relaxed) >= expected }
        let cpuAfter = cpuSeconds() ?? cpuBefore
        let rss = process.residentKiB()
        // After the deadline everything that arrives counts as late; close and collect.
        if nanos() < deadline { state.deadline.store(nanos(), ordering: .relaxed) }
        let delivered = state.delivered.load(ordering: .relaxed)
        for socket in opened.sockets { socket.execute { $0.close() } }
        publisherSocket.execute { $0.close() }
        _ = waitUntil(seconds: 10) { state.closed.load(ordering: .relaxed) >= opened.sockets.count }
        let samples = state.latencies.withLock { $0 }
        return Result(broker: broker, mode: mode, subscribers: subscribers, rate: rate, updates: updates,
                      expected: expected, delivered: delivered, late: state.late.load(ordering: .relaxed),
                      latency: LatencySummary(samples.flatMap { $0 }), brokerCPUSeconds: cpuAfter - cpuBefore,
                      publishSeconds: Double(publishEnd - start) / 1e9,
                      publisherErrors: publisherState.errors.load(ordering: .relaxed),
                      unparsed: state.unparsed.load(ordering: .relaxed),
                      droppedConnections: state.dropped.load(ordering: .relaxed), brokerRSSKiB: rss,
                      idleCPU: idleCPU, latencySamples: samples.flatMap { $0 })
    }

    /// What subscriber `index` sends once connected.
    static func subscribeMessages(broker: BrokerProcess.Kind, mode: Mode, index: Int) -> [[UInt8]] {
        switch (broker, mode) {
        case (.tally, .events): [Array(#"{"op":"subscribe","topic":"bench"}"#.utf8)]
        case (.tally, .records): [Array(#"{"op":"subscribe","name":"bench/r"}"#.utf8)]
        case (.tally, .recordPerSub): [Array(#"{"op":"subscribe","name":"bench/r\#(index)"}"#.utf8)]
        case (.mosquitto, .recordPerSub):
            [MQTT.connect(clientID: "tb-s\(index)") + MQTT.subscribe(topic: "bench/r\(index)")]
        case (.mosquitto, _):
            [MQTT.connect(clientID: "tb-s\(index)") + MQTT.subscribe(topic: "bench")]
        }
    }
}

/// Counters shared by every subscriber of one run (any loop thread).
final class FanoutState: Sendable {
    let acked = Atomic<Int>(0)
    let refused = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let late = Atomic<Int>(0)
    let unparsed = Atomic<Int>(0)
    let closed = Atomic<Int>(0)
    /// Connections the broker closed before the end.
    let dropped = Atomic<Int>(0)
    /// Messages arriving after this monotonic time are late (lost).
    let deadline = Atomic<UInt64>(UInt64.max)
    let latencies = LockedValueBox<[[UInt64]]>([])
    let firstError = LockedValueBox<String?>(nil)
}

/// One subscriber connection, on its loop thread.
final class FanoutSubscriber: WebSocketHandler {
    let state: FanoutState
    let hello: [[UInt8]]
    var latencies: [UInt64] = []
    var decoder = MQTT.Decoder()
    var subscribed = false
    var closing = false

    init(state: FanoutState, hello: [[UInt8]]) {
        self.state = state
        self.hello = hello
    }

    func webSocketDidOpen(_ socket: WebSocket) {
        let kind: WebSocketMessageKind = socket.subprotocol == "mqtt" ? .binary : .text
        for message in hello { socket.send(kind, message) }
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        if kind == .binary {
            decoder.feed(payload) { type, flags, body in
                switch MQTT.PacketType(rawValue: type) {
                case .publish: received(MQTT.publishPayload(body, flags: flags))
                case .suback:
                    // Return code 0x80 means the subscription was refused.
                    if body.count >= 3, body[2] == 0x80 { refuse("SUBACK refused the subscription") } else { acknowledge() }
                case .connack:
                    if body.count >= 2, body[1] != 0 { refuse("CONNACK return code \(body[1])") }
                default: break
                }
            }
            return
        }
        // Tally: pushes start with {"op": ; replies do not.
        if payload.count > 6, payload[2] == UInt8(ascii: "o"), payload[3] == UInt8(ascii: "p") {
            payload.withUnsafeBytes { received($0) }
        } else if !subscribed {
            if payload.starts(with: Array(#"{"ok":true"#.utf8)) {
                acknowledge()
            } else {
                refuse(String(decoding: payload.prefix(300), as: UTF8.self))
            }
        }
    }

    private func received(_ message: UnsafeRawBufferPointer) {
        let now = nanos()
        guard let sent = scanTimestamp(message) else {
            state.unparsed.add(1, ordering: .relaxed)
            return
        }
        if now <= state.deadline.load(ordering: .relaxed) {
            latencies.append(now &- sent)
            state.delivered.add(1, ordering: .relaxed)
        } else {
            state.late.add(1, ordering: .relaxed)
        }
    }

    private func acknowledge() {
        guard !subscribed else { return }
        subscribed = true
        state.acked.add(1, ordering: .relaxed)
    }

    private func refuse(_ reason: String) {
        guard !subscribed else { return }
        subscribed = true
        state.firstError.withLock { if $0 == nil { $0 = reason } }
        state.refused.add(1, ordering: .relaxed)
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        if state.deadline.load(ordering: .relaxed) == UInt64.max { state.dropped.add(1, ordering: .relaxed) }
        let mine = latencies
        latencies = []
        state.latencies.withLock { $0.append(mine) }
        state.closed.add(1, ordering: .relaxed)
    }
}

/// The one publisher connection, on its own loop thread.
final class FanoutPublisher: WebSocketHandler {
    final class Shared: Sendable {
        let ready = Atomic<Bool>(false)
        let replies = Atomic<Int>(0)
        let errors = Atomic<Int>(0)
    }

    let broker: BrokerProcess.Kind
    let mode: FanoutBenchmark.Mode
    let subscribers: Int
    let shared: Shared
    var decoder = MQTT.Decoder()
    /// Pre-built topic names for the rotating mode.
    let topics: [String]

    init(broker: BrokerProcess.Kind, mode: FanoutBenchmark.Mode, subscribers: Int, shared: Shared) {
        self.broker = broker
        self.mode = mode
        self.subscribers = subscribers
        self.shared = shared
        switch (broker, mode) {
        case (_, .recordPerSub): topics = (0..<subscribers).map { "bench/r\($0)" }
        case (.tally, .records): topics = ["bench/r"]
        default: topics = ["bench"]
        }
    }

    func webSocketDidOpen(_ socket: WebSocket) {
        switch broker {
        case .tally: shared.ready.store(true, ordering: .releasing)
        case .mosquitto: socket.send(.binary, MQTT.connect(clientID: "tb-pub"))
        }
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        if kind == .binary {
            decoder.feed(payload) { type, _, body in
                if type == MQTT.PacketType.connack.rawValue {
                    if body.count >= 2, body[1] == 0 { shared.ready.store(true, ordering: .releasing) }
                    else { shared.errors.add(1, ordering: .relaxed) }
                }
            }
            return
        }
        shared.replies.add(1, ordering: .relaxed)
        if !payload.starts(with: Array(#"{"ok":true"#.utf8)) {
            if shared.errors.add(1, ordering: .relaxed).newValue == 1 {
                fputs("publisher got: \(String(decoding: payload.prefix(300), as: UTF8.self))\n", stderr)
            }
        }
    }

    /// Sends update `number`, stamped with the monotonic clock now.
    func publish(_ socket: WebSocket, number: Int) {
        let topic = topics[number % topics.count]
        let t = nanos()
        switch broker {
        case .tally:
            let text: String
            switch mode {
            case .events: text = #"{"op":"publish","topic":"bench","data":{"t":\#(t),"n":\#(number)}}"#
            case .records, .recordPerSub: text = #"{"op":"set","name":"\#(topic)","data":{"t":\#(t),"n":\#(number)}}"#
            }
            socket.send(.text, Array(text.utf8))
        case .mosquitto:
            let payload = Array(#"{"t":\#(t),"n":\#(number)}"#.utf8)
            socket.send(.binary, MQTT.publish(topic: topic, payload: payload, retain: mode != .events))
        }
    }
}
