@preconcurrency import Glibc
import Synchronization
import TallyConcurrency
import TallyNet
import TallyWebSocket

/// What a group of acknowledged writes is counted under, so that each
/// subscription's expected number of pushes can be computed at the end:
/// every record-writer change is under `soak/rec/` or `soak/hot/`, every
/// order step changes one `orders/…` record and `stats/orders` once.
enum SoakStream: Hashable, Sendable {
    /// Orders: each step is one change under `orders/` and one of `stats/orders`.
    case orders
    /// Records run through their stages, under `soak/rec/`.
    case records
    /// Every hot record (`soak/hot/` prefix).
    case hot
    /// One hot record, `soak/hot/{n}`.
    case hotRecord(Int)
}

/// What one subscriber follows.
enum SoakTarget: Sendable, CustomStringConvertible {
    case prefix(String, SoakStream)
    case record(String, SoakStream)

    var description: String {
        switch self {
        case .prefix(let prefix, _): "prefix \(prefix)"
        case .record(let name, _): "record \(name)"
        }
    }

    var stream: SoakStream {
        switch self {
        case .prefix(_, let stream), .record(_, let stream): stream
        }
    }

    /// Record targets check versions (+1 per push); prefix targets only seqs.
    var isRecord: Bool {
        if case .record = self { return true }
        return false
    }

    func subscribe(since: Int64?) -> [UInt8] {
        let resume = since.map { #","since":\#($0)"# } ?? ""
        switch self {
        case .prefix(let prefix, _): return Array(#"{"op":"subscribe","prefix":"\#(prefix)"\#(resume)}"#.utf8)
        case .record(let name, _): return Array(#"{"op":"subscribe","name":"\#(name)"\#(resume)}"#.utf8)
        }
    }

    /// The static subscribers' mix, in blocks of 42: per block one `orders/`
    /// and one `soak/rec/` prefix, two `soak/hot/` prefixes, one
    /// `stats/orders` record and 37 hot records. At 840 writes/s and 210
    /// subscribers that is about 7,000 pushes/s.
    static func subscriber(_ index: Int, hotRecords: Int) -> SoakTarget {
        switch index % 42 {
        case 0: .prefix("orders/", .orders)
        case 1: .prefix("soak/rec/", .records)
        case 2, 3: .prefix("soak/hot/", .hot)
        case 4: .record("stats/orders", .orders)
        default: hot(index, hotRecords: hotRecords)
        }
    }

    /// The reconnecting clients' mix: a third each follow `orders/`, one hot
    /// record and `soak/hot/`.
    static func reconnecting(_ index: Int, hotRecords: Int) -> SoakTarget {
        switch index % 3 {
        case 0: .prefix("orders/", .orders)
        case 1: hot(index, hotRecords: hotRecords)
        default: .prefix("soak/hot/", .hot)
        }
    }

    static func hot(_ index: Int, hotRecords: Int) -> SoakTarget {
        let n = index % max(1, hotRecords)
        return .record("soak/hot/\(n)", .hotRecord(n))
    }
}

/// Counters and findings shared by every client of one soak (any loop
/// thread, and the driver).
final class SoakShared: Sendable {
    let acknowledged = Atomic<Int>(0)
    let pushes = Atomic<Int>(0)
    let resumes = Atomic<Int>(0)
    let subscribed = Atomic<Int>(0)
    /// Writers send nothing new; reconnecting clients finish their cycle and stay.
    let stopping = Atomic<Bool>(false)
    /// Connections are being closed by the benchmark: closes are expected.
    let closing = Atomic<Bool>(false)
    let closed = Atomic<Int>(0)
    /// The seq of every acknowledged write group, per stream.
    let streams = LockedValueBox<[SoakStream: [Int64]]>([:])
    let problems = LockedValueBox<SoakProblems>(SoakProblems())

    func fail(_ kind: String, _ detail: String) {
        problems.withLock { $0.add(kind, detail) }
    }
}

/// Delivery and write errors by kind, with the first few details.
public struct SoakProblems: Sendable {
    public private(set) var counts: [String: Int] = [:]
    public private(set) var examples: [String] = []
    public var total: Int { counts.values.reduce(0, +) }

    mutating func add(_ kind: String, _ detail: String) {
        counts[kind, default: 0] += 1
        if examples.count < 10 { examples.append("\(kind): \(detail)") }
    }
}

/// The clients of one event loop, touched only on that loop's thread.
final class SoakLoopClients: @unchecked Sendable {
    var writers: [SoakWriter] = []
    var subscriptions: [SoakSubscription] = []
    var reconnecting: [SoakReconnectingClient] = []

    func tick(now: UInt64) {
        for writer in writers { writer.tick(now: now) }
        for client in reconnecting { client.tick(now: now) }
    }
}

/// One writer connection: paced at its share of the rate, one write in
/// flight at a time. Even writers run records through four stages and set
/// a hot record; odd ones create orders and advance them to delivered.
final class SoakWriter: WebSocketHandler {
    enum Kind { case records, orders }

    let index: Int
    /// The run's tag, in record names and idempotency keys.
    let tag: String
    let kind: Kind
    /// Index among the writers of its kind.
    let ordinal: Int
    let hotPerWriter: Int
    let items: Int
    let shared: SoakShared
    let interval: UInt64
    var due: UInt64 = .max
    var socket: WebSocket?
    var inFlight = false
    private var streams: [SoakStream] = []
    private var step = 0
    private var item = 0
    private var sent = 0

    init(index: Int, tag: String, hotPerWriter: Int, items: Int, interval: UInt64, shared: SoakShared,
         socket: WebSocket) {
        self.index = index
        self.tag = tag
        kind = index % 2 == 0 ? .records : .orders
        ordinal = index / 2
        self.hotPerWriter = hotPerWriter
        self.items = items
        self.interval = interval
        self.shared = shared
        self.socket = socket
    }

    /// Writers start spread over one interval, not all at once.
    func start(at time: UInt64, of writers: Int) { due = time + interval * UInt64(index) / UInt64(max(1, writers)) }

    func tick(now: UInt64) {
        guard !inFlight, now >= due, let socket, !shared.stopping.load(ordering: .relaxed) else { return }
        // Paced, not bursting: a writer that fell behind by a second starts over from now.
        due += interval
        if due + 1_000_000_000 < now { due = now }
        inFlight = true
        sent += 1
        if !socket.send(.text, nextMessage()) { inFlight = false }
    }

    /// The write for the current step, and the streams its change group counts under.
    private func nextMessage() -> [UInt8] {
        let idem = #","idem":"soak-\#(tag)-w\#(index)-\#(sent)""#
        switch kind {
        case .records:
            let stages = ["new", "picked", "packed", "done"]
            if step < stages.count {
                streams = [.records]
                let data = #"{"stage":"\#(stages[step])","n":\#(item),"w":\#(index),"note":"a soak record moving through its stages"}"#
                return Array(#"{"op":"set","name":"soak/rec/\#(tag)-w\#(index)/\#(item)","data":\#(data)\#(idem)}"#.utf8)
            }
            let hot = ordinal * hotPerWriter + item % hotPerWriter
            streams = [.hot, .hotRecord(hot)]
            return Array(#"{"op":"set","name":"soak/hot/\#(hot)","data":{"n":\#(item),"w":\#(index)}\#(idem)}"#.utf8)
        case .orders:
            streams = [.orders]
            let name = "orders/soak-\(tag)-w\(index)-\(item)"
            if step == 0 {
                let kind = item % 2 == 0 ? "issue" : "receive"
                let data = #"{"item":"items/soak-\#(item % items)","qty":1,"kind":"\#(kind)"}"#
                return Array(#"{"op":"set","name":"\#(name)","data":\#(data)\#(idem)}"#.utf8)
            }
            return Array(#"{"op":"advance","name":"\#(name)"\#(idem)}"#.utf8)
        }
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        guard inFlight else { return }
        inFlight = false
        let steps = self.kind == .records ? 5 : 4
        if payload.starts(with: SoakScan.okPrefix), let seq = SoakScan.integer(after: SoakScan.seqKey, in: payload) {
            shared.acknowledged.add(1, ordering: .relaxed)
            shared.streams.withLock { for stream in streams { $0[stream, default: []].append(seq) } }
            step += 1
        } else {
            shared.fail("write refused", String(decoding: payload.prefix(300), as: UTF8.self))
            step = steps   // start a new record or order
        }
        if step >= steps {
            step = 0
            item += 1
        }
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        self.socket = nil
        if !shared.closing.load(ordering: .relaxed) { shared.fail("writer dropped", "close \(code.rawValue) \(reason)") }
        shared.closed.add(1, ordering: .relaxed)
    }
}

/// One subscription's state, which outlives the connections of a
/// reconnecting client: pushes must come in seq order without repeats and,
/// for a record, with versions rising by one.
final class SoakSubscription {
    let target: SoakTarget
    let shared: SoakShared
    /// The seq of the first subscribe reply: every matching change after it must arrive.
    var startSeq: Int64?
    var lastSeq: Int64 = 0
    var lastVersion: Int64 = 0
    var received = 0

    init(target: SoakTarget, shared: SoakShared) {
        self.target = target
        self.shared = shared
    }

    /// Handles a subscribe reply; returns whether it was a resume.
    func answered(_ reply: [UInt8]) -> Bool? {
        guard reply.starts(with: SoakScan.okPrefix), let seq = SoakScan.integer(after: SoakScan.seqKey, in: reply) else {
            shared.fail("subscribe refused", String(decoding: reply.prefix(300), as: UTF8.self))
            return nil
        }
        if SoakScan.find(SoakScan.resnapshot, in: reply, from: 0) != nil {
            shared.fail("resnapshot", "\(target) since \(lastSeq): the log did not reach back")
        }
        let resumed = startSeq != nil
        if startSeq == nil {
            startSeq = seq
            lastSeq = seq
            if target.isRecord, let at = SoakScan.find(SoakScan.recordObject, in: reply, from: 0) {
                lastVersion = SoakScan.integer(after: SoakScan.versionKey, in: reply, from: at) ?? 0
            }
        } else {
            var at = 0
            while let push = SoakScan.find(SoakScan.pushPrefix, in: reply, from: at) {
                at = push + SoakScan.pushPrefix.count
                apply(reply, at: push)
            }
            lastSeq = max(lastSeq, seq)
        }
        return resumed
    }

    /// Checks one push starting at `start` in `bytes`.
    func apply(_ bytes: [UInt8], at start: Int) {
        guard let seq = SoakScan.integer(after: SoakScan.seqKey, in: bytes, from: start) else {
            return shared.fail("unreadable push", String(decoding: bytes[start...].prefix(200), as: UTF8.self))
        }
        if seq <= lastSeq { shared.fail("out of order or repeated", "\(target): seq \(seq) after \(lastSeq)") }
        lastSeq = max(lastSeq, seq)
        if target.isRecord {
            let version = SoakScan.integer(after: SoakScan.versionKey, in: bytes, from: start) ?? -1
            if version != lastVersion + 1 {
                shared.fail("version gap", "\(target): version \(version) after \(lastVersion) (seq \(seq))")
            }
            lastVersion = version
        }
        received += 1
        shared.pushes.add(1, ordering: .relaxed)
    }
}

/// One connection of a subscription: subscribes (with `since` once it has a
/// resume point), then checks every push.
final class SoakConnection: WebSocketHandler {
    let subscription: SoakSubscription
    /// The reconnecting client that owns this connection, if any.
    let client: SoakReconnectingClient?
    private var answered = false

    init(subscription: SoakSubscription, client: SoakReconnectingClient?) {
        self.subscription = subscription
        self.client = client
    }

    func webSocketDidOpen(_ socket: WebSocket) {
        let since = subscription.startSeq == nil ? nil : subscription.lastSeq
        socket.send(.text, subscription.target.subscribe(since: since))
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        if payload.starts(with: SoakScan.pushPrefix) {
            guard answered else {
                return subscription.shared.fail("push before the reply", "\(subscription.target)")
            }
            return subscription.apply(payload, at: 0)
        }
        guard !answered else { return }
        answered = true
        let resumed = subscription.answered(payload) == true
        if !resumed { subscription.shared.subscribed.add(1, ordering: .relaxed) }
        client?.subscribed(resumed: resumed)
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        if let client { return client.closed(code: code, reason: reason) }
        let shared = subscription.shared
        if !shared.closing.load(ordering: .relaxed) {
            shared.fail("subscriber dropped", "\(subscription.target): close \(code.rawValue) \(reason)")
        }
        shared.closed.add(1, ordering: .relaxed)
    }
}

/// A client that disconnects every few seconds and resumes its subscription
/// from the last seq it saw, as the CLI, the mirror and the browser do.
final class SoakReconnectingClient {
    let subscription: SoakSubscription
    let url: String
    let loop: EventLoop
    let options: WebSocketOptions
    /// Seconds between reconnections: uniformly in this range.
    let period: ClosedRange<Double>
    var random: XorShift
    var socket: WebSocket?
    private var nextCycle: UInt64 = .max
    private var leaving = false
    private(set) var connected = false

    init(index: Int, subscription: SoakSubscription, url: String, loop: EventLoop, options: WebSocketOptions,
         period: ClosedRange<Double>) {
        self.subscription = subscription
        self.url = url
        self.loop = loop
        self.options = options
        self.period = period
        random = XorShift(seed: UInt64(index + 7) &* 0x2545_F491_4F6C_DD1D)
    }

    /// Opens a connection (loop thread).
    func connect() {
        let me = LoopBound(self, on: loop)
        let shared = subscription.shared
        WebSocketClient.connect(to: url, on: loop, options: options, handler: { _ in
            SoakConnection(subscription: me.value.subscription, client: me.value)
        }) { result in
            switch result {
            case .success(let socket): me.value.socket = socket
            case .failure(let error):
                shared.fail("reconnect failed", "\(error)")
                if !shared.closing.load(ordering: .relaxed) { me.value.connect() }
            }
        }
    }

    func subscribed(resumed: Bool) {
        connected = true
        if resumed { subscription.shared.resumes.add(1, ordering: .relaxed) }
        let fraction = Double(random.next() % 1_000_000) / 1_000_000
        let seconds = period.lowerBound + (period.upperBound - period.lowerBound) * fraction
        nextCycle = nanos() + UInt64(seconds * 1e9)
    }

    func tick(now: UInt64) {
        guard now >= nextCycle, let socket, !subscription.shared.stopping.load(ordering: .relaxed) else { return }
        nextCycle = .max
        leaving = true
        socket.close()
    }

    func closed(code: WebSocketCloseCode, reason: String) {
        socket = nil
        connected = false
        let shared = subscription.shared
        if shared.closing.load(ordering: .relaxed) {
            shared.closed.add(1, ordering: .relaxed)
            return
        }
        if !leaving { shared.fail("reconnecting client dropped", "\(subscription.target): close \(code.rawValue) \(reason)") }
        leaving = false
        connect()
    }
}

/// Byte scans over the hub's messages: the benchmark checks seqs and
/// versions without parsing JSON, so the load generator stays light. The
/// hub writes members in a fixed order (`{"op":"change","seq":…,"time":…,
/// "name":…,"version":…`) and escapes quotes inside strings, so
/// `{"op":"change","seq":` only ever starts a push.
enum SoakScan {
    static let okPrefix = Array(#"{"ok":true"#.utf8)
    static let pushPrefix = Array(#"{"op":"change","seq":"#.utf8)
    static let seqKey = Array(#""seq":"#.utf8)
    static let versionKey = Array(#""version":"#.utf8)
    static let recordObject = Array(#""record":{"#.utf8)
    static let resnapshot = Array(#""resnapshot":true"#.utf8)

    /// The index of the first occurrence of `pattern` at or after `from`.
    static func find(_ pattern: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard let first = pattern.first, bytes.count >= pattern.count else { return nil }
        var i = from
        let last = bytes.count - pattern.count
        while i <= last {
            if bytes[i] == first {
                var j = 1
                while j < pattern.count, bytes[i + j] == pattern[j] { j += 1 }
                if j == pattern.count { return i }
            }
            i += 1
        }
        return nil
    }

    /// The whole number right after the first `key` at or after `from`.
    static func integer(after key: [UInt8], in bytes: [UInt8], from: Int = 0) -> Int64? {
        guard var i = find(key, in: bytes, from: from).map({ $0 + key.count }) else { return nil }
        var value: Int64 = 0
        var digits = 0
        while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 {
            value = value &* 10 &+ Int64(bytes[i] - 0x30)
            i += 1
            digits += 1
        }
        return digits > 0 ? value : nil
    }
}
