@preconcurrency import Glibc
import TallyNet

/// Whether writes cost more after a year of orders than on day one (issue
/// 14): a Tally hub child on a fresh store is filled with finished orders
/// to each of `sizes` in turn, and at each size the rate of three writes is
/// measured from 1 and from 100 connections, for `seconds` each:
///
/// - **create**: a `set` of a new `orders/…` record, which the workflow
///   makes an order (stamped, listed, counted in `stats/orders`);
/// - **advance**: an `advance` of an open order by one stage (the orders
///   the create phase made, round robin, up to `delivered`);
/// - **addEntry**: an append to a list filled once, before the first
///   size, to `listEntries` entries.
///
/// Every connection count keeps the same number of requests in flight in
/// total (`window`, shared out among the connections, at least one each),
/// so the rows differ by connections, not by load offered. After each
/// advance phase the orders still open are cancelled, so every size starts
/// with no open orders and its history holds only finished ones. The fill
/// goes through the API in atomic `write`s of up to 1000 ops: the creation
/// of 1000 orders, then their advances stage by stage (a workflow record
/// changes at most once per write).
public struct HistoryBenchmark: Sendable {
    public var sizes = [1_000, 100_000, 1_000_000]
    public var listEntries = 1_000_000
    /// The list addEntry appends to.
    public var list = HistoryRequests.defaultList
    public var seconds = 5.0
    public var connections = [1, 100]
    public var window = 100
    /// One: more would keep more orders open at once while filling, and a
    /// workflow's list of open orders is rewritten whole by each change.
    public var fillConnections = 1
    public var batch = 1000
    public var durability = "full"
    public var threads = 1
    public init() {}

    public enum Measure: String, Sendable, CaseIterable {
        case create, advance, addEntry
    }

    public struct Row: Sendable {
        public var size: Int
        public var measure: Measure
        public var connections: Int
        public var acknowledged: Int
        public var errors: Int
        public var seconds: Double
        /// Why the row could not be measured (the list was refused, …), or
        /// the first error answer.
        public var failure: String?
        /// The hub's CPU time (every thread) while the row ran: per
        /// operation it moves far less than the rate on a shared machine.
        public var hubCPUSeconds: Double?
        public var rate: Double { seconds > 0 ? Double(acknowledged) / seconds : 0 }
        /// Hub CPU microseconds per acknowledged operation.
        public var cpuPerOperation: Double? {
            guard let cpu = hubCPUSeconds, acknowledged > 0 else { return nil }
            return cpu * 1e6 / Double(acknowledged)
        }
        public var failed: Bool { failure != nil && (acknowledged == 0 || errors > 0) }
    }

    public struct Fill: Sendable {
        /// The size filled to.
        public var size: Int
        /// Finished orders in the hub once filled (at least `size`: the
        /// orders earlier phases made are finished too).
        public var finished: Int
        /// Orders this fill added (the rest came from earlier sizes and phases).
        public var added: Int
        public var seconds: Double
        public var ordersPerSecond: Double { seconds > 0 ? Double(added) / seconds : 0 }
    }

    public struct Ratio: Sendable {
        public var measure: Measure
        public var connections: Int
        public var smallest: Double
        public var largest: Double
        /// Hub CPU µs per operation at the smallest and the largest size.
        public var smallestCPU: Double?
        public var largestCPU: Double?
        public var ratio: Double { smallest > 0 ? largest / smallest : .nan }
        /// CPU per operation at the largest size ÷ at the smallest (1 = no growth).
        public var cpuRatio: Double? {
            guard let small = smallestCPU, let large = largestCPU, small > 0 else { return nil }
            return large / small
        }
        public var met: Bool { ratio >= HistoryBenchmark.target }
    }

    /// The issue's target: the rate at the largest size at least 0.8× the rate at the smallest.
    public static let target = 0.8

    public struct Result: Sendable {
        public var rows: [Row]
        public var fills: [Fill]
        public var listEntries: Int
        public var listSeconds: Double
        /// Why the list could not be filled to `listEntries` (the hub's refusal).
        public var listFailure: String?
        public var ratios: [Ratio]
    }

    public func run(log: (String) -> Void) throws(FanoutBenchmark.Failure) -> Result {
        let work = makeTemporaryDirectory("tally-history")
        defer { removeTree(work) }
        let hub: BrokerProcess
        do {
            hub = try .tally(dataDirectory: work + "/data", workDirectory: work, extraArguments: ["--durability", durability])
        } catch { throw .broker(error) }
        defer { hub.terminate(graceSeconds: 120) }
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: threads) } catch { throw .connect("\(error)") }
        defer { group.shutdown() }
        log("tally pid \(hub.pid) on port \(hub.port), durability \(durability)")

        let fillers = try ClientPool.open(count: max(1, fillConnections), url: hub.url, group: group)
        defer { fillers.close() }
        let item = ScriptJob(messages: [Array(#"{"op":"set","name":"\#(HistoryRequests.item)","data":{"stock":0}}"#.utf8)])
        let made = fillers.run(seconds: nil, window: 1) { $0 == 0 ? item : ScriptJob(messages: []) }
        guard made.errors == 0 else { throw .subscribe("creating \(HistoryRequests.item) failed: \(made.firstError ?? "?")") }

        // The list, once.
        log("filling \(list) to \(listEntries) entries")
        let listProgress = FillProgress(total: listEntries, batch: batch)
        let listFill = fillers.run(seconds: nil, window: 1) { _ in ListFillJob(progress: listProgress, list: list) }
        let listed = listProgress.done.load(ordering: .relaxed)
        var listFailure: String?
        if listed < listEntries {
            listFailure = "the list holds \(listed) entries, not \(listEntries): " + (listFill.firstError ?? "the fill stopped")
            log(listFailure!)
        }
        log("  \(listed) entries in \(format(listFill.seconds, 1)) s")

        var rows: [Row] = []
        var fills: [Fill] = []
        var finished = 0
        for size in sizes.sorted() {
            let needed = max(0, size - finished)
            let progress = FillProgress(total: needed, batch: batch)
            log("filling to \(size) finished orders (\(needed) more)")
            let fill = fillers.run(seconds: nil, window: 1) { _ in OrderFillJob(progress: progress, prefix: "h\(size)-") }
            let added = progress.done.load(ordering: .relaxed)
            finished += added
            guard added == needed else {
                throw .subscribe("filling orders stopped at \(finished) of \(size): \(fill.firstError ?? "?")")
            }
            fills.append(Fill(size: size, finished: finished, added: added, seconds: fill.seconds))
            log("  \(added) orders in \(format(fill.seconds, 1)) s (\(format(fills.last!.ordersPerSecond, 0))/s)")

            for count in connections {
                let pool = try ClientPool.open(count: count, url: hub.url, group: group)
                defer { pool.close() }
                let perConnection = max(1, window / count)
                var cpuAtStart = hub.cpuSeconds()
                func row(_ measure: Measure, _ outcome: ClientPool.Outcome, failure: String? = nil) -> Row {
                    let silent = outcome.acknowledged == 0 && outcome.errors == 0
                    var r = Row(size: size, measure: measure, connections: count, acknowledged: outcome.acknowledged,
                                errors: outcome.errors, seconds: outcome.seconds,
                                failure: failure ?? outcome.firstError
                                    ?? (silent ? "nothing was acknowledged within \(format(outcome.seconds, 2)) s" : nil))
                    if let start = cpuAtStart, let end = hub.cpuSeconds() { r.hubCPUSeconds = end - start }
                    log("  \(size) orders, \(measure.rawValue), \(count) connections: \(r.acknowledged) in \(format(r.seconds, 2)) s = \(format(r.rate, 0))/s"
                        + (r.cpuPerOperation.map { ", hub CPU \(format($0, 1)) µs/op" } ?? "")
                        + (r.errors > 0 ? ", \(r.errors) errors (first: \(r.failure ?? "?"))" : ""))
                    return r
                }

                // Creations.
                cpuAtStart = hub.cpuSeconds()
                var creators: [CreateJob] = []
                let created = pool.run(seconds: seconds, window: perConnection) { index in
                    let job = CreateJob(tag: "m\(size)c\(count)n\(index)")
                    creators.append(job)
                    return job
                }
                rows.append(row(.create, created))

                // Advances of what was created.
                let orders = creators.map { job in job.created.map(job.name) }
                var advancers: [AdvanceJob] = []
                cpuAtStart = hub.cpuSeconds()
                let advanced = pool.run(seconds: seconds, window: perConnection) { index in
                    let job = AdvanceJob(orders: orders[index])
                    advancers.append(job)
                    return job
                }
                rows.append(row(.advance, advanced,
                                failure: orders.allSatisfy(\.isEmpty) ? "no orders were created to advance" : nil))
                finished += orders.reduce(0) { $0 + $1.count }

                // The orders still open are cancelled, untimed.
                let open = advancers.flatMap(\.open)
                if !open.isEmpty {
                    var groups: [[String]] = []
                    var start = 0
                    while start < open.count {
                        let end = min(open.count, start + batch)
                        groups.append(open[start..<end].map { HistoryRequests.advanceOp($0, to: "cancelled") })
                        start = end
                    }
                    let cancel = ScriptJob(groups: groups)
                    _ = fillers.run(seconds: nil, window: 1) { $0 == 0 ? cancel : ScriptJob(messages: []) }
                    if cancel.refused > 0 { log("  \(cancel.refused) of \(open.count) open orders could not be cancelled") }
                }

                // Appends to the big list.
                if let listFailure {
                    rows.append(row(.addEntry, ClientPool.Outcome(acknowledged: 0, errors: 0, seconds: 0, firstError: nil),
                                    failure: listFailure))
                } else {
                    cpuAtStart = hub.cpuSeconds()
                    let appended = pool.run(seconds: seconds, window: perConnection) { index in
                        AddEntryJob(tag: "\(size)c\(count)n\(index)", list: list)
                    }
                    rows.append(row(.addEntry, appended))
                }
            }
        }

        var ratios: [Ratio] = []
        let ordered = sizes.sorted()
        if let smallest = ordered.first, let largest = ordered.last {
            for measure in Measure.allCases {
                for count in connections {
                    func find(_ size: Int) -> Row? {
                        rows.first { $0.size == size && $0.measure == measure && $0.connections == count && !$0.failed }
                    }
                    ratios.append(Ratio(measure: measure, connections: count, smallest: find(smallest)?.rate ?? 0,
                                        largest: find(largest)?.rate ?? 0, smallestCPU: find(smallest)?.cpuPerOperation,
                                        largestCPU: find(largest)?.cpuPerOperation))
                }
            }
        }
        return Result(rows: rows, fills: fills, listEntries: listed, listSeconds: listFill.seconds,
                      listFailure: listFailure, ratios: ratios)
    }
}

extension HistoryBenchmark.Result {
    /// The result as one JSON object (for `--json`).
    public var json: String {
        func string(_ text: String?) -> String {
            guard let text else { return "null" }
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                default:
                    if scalar.value < 0x20 {
                        let hex = String(scalar.value, radix: 16)
                        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                    } else {
                        out.unicodeScalars.append(scalar)
                    }
                }
            }
            return out + "\""
        }
        func number(_ value: Double, _ digits: Int = 1) -> String { value.isFinite ? format(value, digits) : "null" }
        let rows = rows.map { r in
            #"{"size":\#(r.size),"measure":"\#(r.measure.rawValue)","connections":\#(r.connections),"acknowledged":\#(r.acknowledged),"errors":\#(r.errors),"seconds":\#(number(r.seconds, 3)),"rate":\#(number(r.rate)),"cpuMicrosPerOp":\#(r.cpuPerOperation.map { number($0, 2) } ?? "null"),"failed":\#(r.failed),"failure":\#(string(r.failure))}"#
        }
        let fills = fills.map { f in
            #"{"size":\#(f.size),"finished":\#(f.finished),"added":\#(f.added),"seconds":\#(number(f.seconds, 3)),"ordersPerSecond":\#(number(f.ordersPerSecond))}"#
        }
        let ratios = ratios.map { q in
            #"{"measure":"\#(q.measure.rawValue)","connections":\#(q.connections),"smallest":\#(number(q.smallest)),"largest":\#(number(q.largest)),"ratio":\#(number(q.ratio, 3)),"cpuRatio":\#(q.cpuRatio.map { number($0, 3) } ?? "null"),"target":\#(HistoryBenchmark.target),"met":\#(q.met)}"#
        }
        return #"{"rows":[\#(rows.joined(separator: ","))],"fills":[\#(fills.joined(separator: ","))],"list":{"entries":\#(listEntries),"seconds":\#(number(listSeconds, 3)),"failure":\#(string(listFailure))},"ratios":[\#(ratios.joined(separator: ","))]}"#
    }
}
