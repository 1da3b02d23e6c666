import Synchronization
import TallyNet

/// The requests `HistoryBenchmark` (and `BrokerStartupBenchmark --orders`)
/// send, one job per connection and phase (see `ConnectionJob`).
enum HistoryRequests {
    static let item = "items/bench-history"
    static let defaultList = "bench/history-list"

    /// A new order (`set` of a new `orders/…` record: the workflow stamps
    /// its stage, history and owner, lists it and counts it). `receive`
    /// orders add stock on delivery, so deliveries never run out of it.
    static func createOp(_ name: String) -> String {
        #"{"op":"set","name":"\#(name)","data":{"item":"\#(item)","qty":1,"kind":"receive"}}"#
    }

    static func advanceOp(_ name: String, to stage: String? = nil) -> String {
        stage.map { #"{"op":"advance","name":"\#(name)","to":"\#($0)"}"# } ?? #"{"op":"advance","name":"\#(name)"}"#
    }

    static func addEntryOp(_ entry: String, list: String) -> String {
        #"{"op":"addEntry","list":"\#(list)","entry":"\#(entry)"}"#
    }

    /// One atomic `write` of `ops` (at most 1000).
    static func write(_ ops: some Sequence<String>) -> [UInt8] {
        Array((#"{"op":"write","ops":["# + ops.joined(separator: ",") + "]}").utf8)
    }

    /// The stages an order passes after `received` to be finished.
    static let finishingStages = ["in-progress", "ready", "delivered"]
}

/// Shared by the connections of a fill: which batch is next, how much is
/// done, the first refusal.
final class FillProgress: Sendable {
    let total: Int
    let batch: Int
    let nextBatch = Atomic<Int>(0)
    let done = Atomic<Int>(0)
    let failed = Atomic<Bool>(false)

    init(total: Int, batch: Int) {
        self.total = total
        self.batch = max(1, min(1000, batch))
    }

    /// The next batch's range, or nil when the fill is complete or failed.
    func take() -> Range<Int>? {
        guard !failed.load(ordering: .relaxed) else { return nil }
        let first = nextBatch.add(1, ordering: .relaxed).oldValue * batch
        guard first < total else { return nil }
        return first..<min(total, first + batch)
    }
}

/// Fills the hub with finished orders `orders/{prefix}{i}`: per batch one
/// atomic `write` creating them, then one per stage advancing them all to
/// `delivered` (a workflow record changes at most once per write). One
/// request in flight.
final class OrderFillJob: ConnectionJob {
    let progress: FillProgress
    let prefix: String
    private var range: Range<Int>?
    private var step = 0

    init(progress: FillProgress, prefix: String) {
        self.progress = progress
        self.prefix = prefix
    }

    func next() -> [UInt8]? {
        if range == nil || step > HistoryRequests.finishingStages.count {
            guard let taken = progress.take() else { return nil }
            range = taken
            step = 0
        }
        guard let range else { return nil }
        if step == 0 { return HistoryRequests.write(range.lazy.map { HistoryRequests.createOp("orders/\(self.prefix)\($0)") }) }
        let stage = HistoryRequests.finishingStages[step - 1]
        return HistoryRequests.write(range.lazy.map { HistoryRequests.advanceOp("orders/\(self.prefix)\($0)", to: stage) })
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {
        guard ok, let range else { progress.failed.store(true, ordering: .relaxed); return }
        step += 1
        if step > HistoryRequests.finishingStages.count { progress.done.add(range.count, ordering: .relaxed) }
    }
}

/// Appends `bench/history/e{i}` to the benchmark's list in atomic writes of
/// `addEntry`s.
final class ListFillJob: ConnectionJob {
    let progress: FillProgress
    let list: String
    private var pending = 0

    init(progress: FillProgress, list: String) {
        self.progress = progress
        self.list = list
    }

    func next() -> [UInt8]? {
        guard let range = progress.take() else { return nil }
        pending = range.count
        return HistoryRequests.write(range.lazy.map { HistoryRequests.addEntryOp("bench/history/e\($0)", list: self.list) })
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {
        if ok { progress.done.add(pending, ordering: .relaxed) } else { progress.failed.store(true, ordering: .relaxed) }
    }
}

/// Sends a fixed list of requests; a refused group of single ops is sent
/// again op by op (so one order in an unexpected stage does not keep the
/// others open), and refusals of single ops are only counted.
final class ScriptJob: ConnectionJob {
    private var queue: [(message: [UInt8], ops: [String]?)]
    private var head = 0
    private var inFlight: [[String]?] = []
    private(set) var refused = 0

    /// `groups`: each sent as one atomic `write`, its ops again one by one
    /// if the write is refused.
    init(groups: [[String]]) {
        queue = groups.map { (HistoryRequests.write($0), $0) }
    }

    init(messages: [[UInt8]]) {
        queue = messages.map { ($0, nil) }
    }

    func next() -> [UInt8]? {
        guard head < queue.count else { return nil }
        defer { head += 1 }
        inFlight.append(queue[head].ops)
        return queue[head].message
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {
        guard index < inFlight.count else { return }
        if !ok {
            if let ops = inFlight[index] {
                for op in ops { queue.append((Array(op.utf8), nil)) }
            } else {
                refused += 1
            }
        }
    }
}

/// Creates orders `orders/{tag}-{k}` one `set` at a time and remembers
/// which were created.
final class CreateJob: ConnectionJob {
    let tag: String
    private var k = 0
    private(set) var created: [Int] = []

    init(tag: String) { self.tag = tag }

    func next() -> [UInt8]? {
        defer { k += 1 }
        return Array(HistoryRequests.createOp("orders/\(tag)-\(k)").utf8)
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {
        if ok { created.append(index) }
    }

    func name(_ k: Int) -> String { "orders/\(tag)-\(k)" }
}

/// Advances the orders a `CreateJob` created, one stage per `advance`,
/// round robin, each at most to `delivered`; remembers how far each got.
final class AdvanceJob: ConnectionJob {
    let orders: [String]
    private var sent: [UInt8]
    private(set) var advanced: [UInt8]
    private var cursor = 0
    private var remaining: Int
    private var inFlight: [Int] = []
    private var answered = 0

    init(orders: [String]) {
        self.orders = orders
        sent = Array(repeating: 0, count: orders.count)
        advanced = sent
        remaining = orders.count * HistoryRequests.finishingStages.count
    }

    func next() -> [UInt8]? {
        guard remaining > 0 else { return nil }
        while sent[cursor] >= HistoryRequests.finishingStages.count { cursor = (cursor + 1) % orders.count }
        let order = cursor
        sent[order] += 1
        remaining -= 1
        cursor = (cursor + 1) % orders.count
        inFlight.append(order)
        return Array(HistoryRequests.advanceOp(orders[order]).utf8)
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {
        guard index < inFlight.count else { return }
        if ok { advanced[inFlight[index]] += 1 }
    }

    /// Orders not finished: neither delivered here nor refused on the way.
    var open: [String] {
        orders.indices.filter { advanced[$0] < HistoryRequests.finishingStages.count }.map { orders[$0] }
    }
}

/// Appends `bench/history/a{tag}-{k}` to the benchmark's list, one
/// `addEntry` at a time.
final class AddEntryJob: ConnectionJob {
    let tag: String
    let list: String
    private var k = 0

    init(tag: String, list: String) {
        self.tag = tag
        self.list = list
    }

    func next() -> [UInt8]? {
        defer { k += 1 }
        return Array(HistoryRequests.addEntryOp("bench/history/a\(tag)-\(k)", list: list).utf8)
    }

    func reply(_ index: Int, ok: Bool, _ payload: [UInt8]) {}
}
