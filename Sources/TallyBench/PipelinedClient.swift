@preconcurrency import Glibc
import Synchronization
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// What one connection sends, one request at a time, in a phase of a
/// benchmark: `next` gives the next request (nil: nothing more to send) and
/// `reply` hears each answer, in the order the requests went out. Confined
/// to the connection's loop thread.
protocol ConnectionJob: AnyObject {
    /// The next request, without its `id` member (the client adds it), or nil.
    func next() -> [UInt8]?
    /// The answer to the request `next` gave as number `index` (0, 1, …).
    func reply(_ index: Int, ok: Bool, _ payload: [UInt8])
}

/// Counts shared by every connection of one phase.
final class PhaseCounters: Sendable {
    /// Requests acknowledged with `"ok":true` before the phase's end.
    let acknowledged = Atomic<Int>(0)
    /// Requests answered with an error before the phase's end.
    let errors = Atomic<Int>(0)
    /// Connections that have stopped (nothing in flight and nothing more to send).
    let stopped = Atomic<Int>(0)
    /// Monotonic nanoseconds when the last connection to stop did so.
    let lastStop = Atomic<UInt64>(0)
    let firstError = LockedValueBox<String?>(nil)
    let end: UInt64

    init(end: UInt64) { self.end = end }

    func noteError(_ payload: [UInt8]) {
        errors.add(1, ordering: .relaxed)
        firstError.withLock { if $0 == nil { $0 = String(decoding: payload.prefix(300), as: UTF8.self) } }
    }
}

/// One WebSocket client connection that keeps up to `window` requests of
/// its current job in flight (pipelined: the hub answers each connection's
/// requests in order) until the job has nothing more to send or the phase's
/// end passes; answers that arrive after the end are not counted.
final class PipelinedClient: WebSocketHandler {
    private var job: (any ConnectionJob)?
    private var counters: PhaseCounters?
    private var window = 1
    private var sent = 0
    private var answered = 0
    private var draining = false
    private var nextID = 1
    /// Strong until the close (then released, ending the cycle through the connection).
    private(set) var socket: WebSocket?
    private(set) var closed = false
    private static let okPrefix = Array(#"{"ok":true"#.utf8)
    private static let idPrefix = Array(#"{"id":"#.utf8)

    init(socket: WebSocket) { self.socket = socket }

    /// Starts `job` (on the loop thread).
    func start(_ job: any ConnectionJob, window: Int, counters: PhaseCounters) {
        self.job = job
        self.counters = counters
        self.window = max(1, window)
        sent = 0
        answered = 0
        draining = false
        fill()
    }

    private func fill() {
        guard let job, let counters, let socket else { return stop() }
        while !draining, sent - answered < window {
            if nanos() > counters.end { draining = true; break }
            guard let body = job.next() else { draining = true; break }
            // {"op":…} → {"id":N,"op":…}; the id only helps a reader of a capture.
            var message = Self.idPrefix
            message.reserveCapacity(body.count + 16)
            message.append(contentsOf: "\(nextID),".utf8)
            message.append(contentsOf: body.dropFirst())
            nextID += 1
            sent += 1
            if !socket.send(.text, message) { draining = true; break }
        }
        if draining, sent == answered { stop() }
    }

    private func stop() {
        guard let counters else { return }
        self.counters = nil
        job = nil
        counters.lastStop.store(nanos(), ordering: .relaxed)
        // Releasing: the job's results are read by the thread that waits for this count.
        counters.stopped.add(1, ordering: .releasing)
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        guard let job, let counters, answered < sent else { return }
        let index = answered
        answered += 1
        let ok = Self.isOK(payload)
        if nanos() <= counters.end {
            if ok { counters.acknowledged.add(1, ordering: .relaxed) } else { counters.noteError(payload) }
        }
        job.reply(index, ok: ok, payload)
        fill()
    }

    /// `{"id":N,"ok":true…` or `{"ok":true…`.
    static func isOK(_ payload: [UInt8]) -> Bool {
        if payload.starts(with: okPrefix) { return true }
        guard payload.starts(with: idPrefix) else { return false }
        var i = idPrefix.count
        while i < payload.count, payload[i] != UInt8(ascii: ",") { i += 1 }
        return payload[(i + 1)...].starts(with: Array(#""ok":true"#.utf8))
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        self.socket = nil
        closed = true
        if let counters {
            counters.firstError.withLock { if $0 == nil { $0 = "the hub closed the connection (\(code.rawValue) \(reason))" } }
            stop()
        }
    }
}

/// A set of open pipelined connections to one hub, and the running of a
/// phase on them.
final class ClientPool: Sendable {
    let clients: [(LoopBound<PipelinedClient>, EventLoop)]

    private init(clients: [(LoopBound<PipelinedClient>, EventLoop)]) { self.clients = clients }

    static func open(count: Int, url: String, group: EventLoopGroup) throws(FanoutBenchmark.Failure) -> ClientPool {
        var options = WebSocketOptions()
        options.deflate.enabled = false
        let made = LockedValueBox<[(Int, LoopBound<PipelinedClient>, EventLoop)]>([])
        let opened = openConnections(count: count, url: url, group: group, options: options) { index, socket in
            let client = PipelinedClient(socket: socket)
            made.withLock { $0.append((index, LoopBound(client, on: socket.loop), socket.loop)) }
            return client
        }
        guard opened.failed == 0 else {
            for socket in opened.sockets { socket.execute { $0.close() } }
            throw .connect("\(opened.failed) of \(count) connections failed: \(opened.firstError.map { "\($0)" } ?? "?")")
        }
        let clients = made.withLock { $0 }.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
        return ClientPool(clients: clients)
    }

    struct Outcome {
        var acknowledged: Int
        var errors: Int
        /// From the start to the end of the phase, or to the moment the
        /// last connection ran out of work if that came first.
        var seconds: Double
        var firstError: String?
    }

    /// Runs one job per connection (`makeJob(index)`, called here, handed to
    /// the connection's loop) with `window` requests in flight each, for at
    /// most `seconds` (nil: until every job is done), and waits for the
    /// answers still in flight.
    func run(seconds: Double?, window: Int, makeJob: (Int) -> any ConnectionJob) -> Outcome {
        let start = nanos()
        let counters = PhaseCounters(end: seconds.map { start + UInt64($0 * 1e9) } ?? .max)
        for (index, (client, loop)) in clients.enumerated() {
            let job = Handoff(makeJob(index))
            loop.execute { client.value.start(job.value, window: window, counters: counters) }
        }
        while counters.stopped.load(ordering: .acquiring) < clients.count {
            usleep(2_000)
            // A hub that stops answering: give it the phase plus a minute.
            if let seconds, nanos() > start + UInt64((seconds + 60) * 1e9) {
                counters.firstError.withLock { if $0 == nil { $0 = "answers stopped coming" } }
                break
            }
        }
        let stopped = counters.lastStop.load(ordering: .relaxed)
        let end = min(counters.end, stopped == 0 ? nanos() : stopped)
        return Outcome(acknowledged: counters.acknowledged.load(ordering: .relaxed),
                       errors: counters.errors.load(ordering: .relaxed),
                       seconds: Double(end - start) / 1e9, firstError: counters.firstError.withLock { $0 })
    }

    func close() {
        for (client, loop) in clients { loop.execute { client.value.socket?.close() } }
    }
}
