import TallyProtocol

/// The live aggregate of one workflow, published as its stats record:
/// records per stage, time spent per stage, and the oldest open record.
///
/// The hub builds it once by recounting the records (so it always equals a
/// recount, even after a config change) and then moves it by deltas, each
/// applied only when the change that caused it is accepted.
public struct WorkflowStats: Sendable, Equatable {
    public struct StageTime: Sendable, Equatable {
        public var totalMs: Int64 = 0
        public var exits: Int64 = 0
    }

    public struct OpenRecord: Sendable, Equatable {
        public var name: String
        public var created: Int64
    }

    /// What one accepted write group does to the stats.
    public struct Delta: Sendable, Equatable {
        public var counts: [String: Int] = [:]
        public var stageTime: [String: StageTime] = [:]
        public var opened: [OpenRecord] = []
        public var closed: Set<ByteKey> = []

        public init() {}

        mutating func enter(_ stage: String) { counts[stage, default: 0] += 1 }
        mutating func leave(_ stage: String) { counts[stage, default: 0] -= 1 }
        /// A deleted record's time leaves the figures, so they always equal
        /// a recount of the records there are.
        mutating func forget(_ data: JSONObject) {
            for (stage, time) in WorkflowStats.stageTimes(of: data) {
                stageTime[stage, default: StageTime()].totalMs -= time.totalMs
                stageTime[stage, default: StageTime()].exits -= time.exits
            }
        }

        mutating func spent(_ ms: Int64, in stage: String) {
            stageTime[stage, default: StageTime()].totalMs += max(0, ms)
            stageTime[stage, default: StageTime()].exits += 1
        }
    }

    public let stages: [String]
    public private(set) var counts: [String: Int] = [:]
    public private(set) var stageTime: [String: StageTime] = [:]
    private var open: [ByteKey: Int64] = [:]
    public private(set) var oldest: OpenRecord?

    public init(workflow: Workflow) {
        stages = workflow.stages
    }

    public var total: Int { counts.values.reduce(0, +) }

    /// Counts one existing record (the recount at start).
    public mutating func count(_ record: RecordState, in workflow: Workflow) {
        guard let stage = record.data[workflow.stageField]?.stringValue else { return }
        counts[stage, default: 0] += 1
        if workflow.isOpen(stage) {
            open[ByteKey(record.name)] = record.created
            if oldest.map({ Self.older(record.created, record.name, than: $0) }) ?? true {
                oldest = OpenRecord(name: record.name, created: record.created)
            }
        }
        for (stage, time) in Self.stageTimes(of: record.data) {
            stageTime[stage, default: StageTime()].totalMs += time.totalMs
            stageTime[stage, default: StageTime()].exits += time.exits
        }
    }

    /// Time a record spent in each stage it has left, from its history: each
    /// entry's time is when the record entered that entry's stage.
    static func stageTimes(of data: JSONObject) -> [String: StageTime] {
        var times: [String: StageTime] = [:]
        guard case .array(let history)? = data["history"] else { return times }
        var previous: (stage: String, time: Int64)?
        for case .object(let entry) in history {
            guard let to = entry["to"]?.stringValue, let time = entry["time"]?.numberValue?.int64Value else { continue }
            if let previous {
                times[previous.stage, default: StageTime()].totalMs += max(0, time - previous.time)
                times[previous.stage, default: StageTime()].exits += 1
            }
            previous = (to, time)
        }
        return times
    }

    public mutating func apply(_ delta: Delta) {
        for (stage, change) in delta.counts { counts[stage, default: 0] += change }
        for (stage, time) in delta.stageTime {
            stageTime[stage, default: StageTime()].totalMs += time.totalMs
            stageTime[stage, default: StageTime()].exits += time.exits
        }
        let newOldest = oldest(after: delta)
        for name in delta.closed { open[name] = nil }
        for record in delta.opened { open[ByteKey(record.name)] = record.created }
        oldest = newOldest
    }

    /// The oldest open record once `delta` is applied. Scans the open
    /// records only when the current oldest closes.
    func oldest(after delta: Delta) -> OpenRecord? {
        var best: OpenRecord?
        func consider(_ name: String, _ created: Int64) {
            if best.map({ Self.older(created, name, than: $0) }) ?? true { best = OpenRecord(name: name, created: created) }
        }
        if let oldest, !delta.closed.contains(ByteKey(oldest.name)) {
            best = oldest
        } else if oldest != nil {
            for (key, created) in open where !delta.closed.contains(key) { consider(key.string, created) }
        }
        for record in delta.opened where !delta.closed.contains(ByteKey(record.name)) { consider(record.name, record.created) }
        return best
    }

    /// Ties on time go to the smaller name, so a recount and the running
    /// figure agree.
    static func older(_ created: Int64, _ name: String, than other: OpenRecord) -> Bool {
        created != other.created ? created < other.created : name.utf8.lexicographicallyPrecedes(other.name.utf8)
    }

    /// The stats record's data after `delta`.
    public func record(after delta: Delta, now: Int64) -> JSONObject {
        var countsObject: JSONObject = [:]
        var timeObject: JSONObject = [:]
        var total = 0
        for stage in stages {
            let count = (counts[stage] ?? 0) + (delta.counts[stage] ?? 0)
            total += count
            countsObject[stage] = .number(JSONNumber(count))
            var time = stageTime[stage] ?? StageTime()
            if let more = delta.stageTime[stage] {
                time.totalMs += more.totalMs
                time.exits += more.exits
            }
            timeObject[stage] = .object([
                "totalMs": .number(JSONNumber(time.totalMs)), "exits": .number(JSONNumber(time.exits)),
                "averageMs": .number(JSONNumber(time.exits > 0 ? time.totalMs / time.exits : 0)),
            ])
        }
        let oldestOpen: JSONValue = oldest(after: delta).map {
            .object(["name": .string($0.name), "created": .number(JSONNumber($0.created))])
        } ?? .null
        return ["counts": .object(countsObject), "total": .number(JSONNumber(total)),
                "stageTime": .object(timeObject), "oldestOpen": oldestOpen, "updated": .number(JSONNumber(now))]
    }
}
