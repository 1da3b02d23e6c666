import TallyProtocol

/// The live aggregate of one workflow, published as its stats record:
/// records per stage, time spent per stage, and the oldest open record.
///
/// The hub reads it back from the stats record it last wrote, with the open
/// records from the workflow's list (`init(restoring:open:workflow:)`:
/// O(open records), so a restart does not read every record the workflow
/// ever had), and recounts the records only when that record is missing or
/// does not fit the workflow as configured now. It then moves it by deltas,
/// each applied only when the change that caused it is accepted; the stats
/// record is written in the same atomic group as the change, so what is
/// read back always equals a recount.
public struct WorkflowStats: Sendable, Equatable {
    public struct StageTime: Sendable, Equatable {
        public var totalMs: Int64 = 0
        public var exits: Int64 = 0
    }

    public struct OpenRecord: Sendable, Equatable {
        public var name: String
        public var created: Int64

        public init(name: String, created: Int64) {
            self.name = name
            self.created = created
        }
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

        /// What a change from `before` to `after` (either nil: created,
        /// deleted) does to the stats of `workflow`: the record as it was
        /// leaves the figures and the record as it is enters them, so the
        /// figures stay equal to a recount. For a change this hub did not
        /// plan (another hub's), where the planner's own delta is not known.
        public init(replacing before: RecordState?, with after: RecordState?, in workflow: Workflow) {
            if let before, let stage = before.data[workflow.stageField]?.stringValue {
                leave(stage)
                if workflow.isOpen(stage) { closed.insert(ByteKey(before.name)) }
                forget(before.data)
            }
            if let after, let stage = after.data[workflow.stageField]?.stringValue {
                enter(stage)
                if workflow.isOpen(stage) { opened.append(OpenRecord(name: after.name, created: after.created)) }
                for (stage, time) in WorkflowStats.stageTimes(of: after.data) {
                    stageTime[stage, default: StageTime()].totalMs += time.totalMs
                    stageTime[stage, default: StageTime()].exits += time.exits
                }
            }
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

    /// The stats as `record(after:now:)` wrote them into `data`, with the
    /// workflow's open records (each with its creation time), or nil when
    /// they do not fit `workflow` as configured now: a stage missing or
    /// extra, a figure that is not a whole number ≥ 0, a total that is not
    /// the sum of the counts, or open records that are not exactly as many
    /// as the counts of the open stages say (or named twice). The caller
    /// then recounts.
    public init?(restoring data: JSONObject, open: [OpenRecord], workflow: Workflow) {
        stages = workflow.stages
        guard case .object(let countsObject)? = data["counts"], case .object(let times)? = data["stageTime"],
              countsObject.count == stages.count, Set(countsObject.keys) == Set(stages),
              Set(times.keys).isSubset(of: Set(stages)),
              let total = data["total"]?.numberValue?.int64Value else { return nil }
        func whole(_ value: JSONValue?) -> Int64? {
            guard case .number(let number)? = value, let n = number.int64Value, n >= 0 else { return nil }
            return n
        }
        var sum: Int64 = 0
        var openCount: Int64 = 0
        for stage in stages {
            guard let count = whole(countsObject[stage]) else { return nil }
            counts[stage] = Int(count)
            sum += count
            if workflow.isOpen(stage) { openCount += count }
            guard let time = times[stage] else { continue }
            guard case .object(let figures) = time, let totalMs = whole(figures["totalMs"]),
                  let exits = whole(figures["exits"]) else { return nil }
            if totalMs != 0 || exits != 0 { stageTime[stage] = StageTime(totalMs: totalMs, exits: exits) }
        }
        guard sum == total, openCount == Int64(open.count) else { return nil }
        for record in open {
            guard self.open.updateValue(record.created, forKey: ByteKey(record.name)) == nil else { return nil }
            if oldest.map({ Self.older(record.created, record.name, than: $0) }) ?? true { oldest = record }
        }
    }

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

    /// Applies `delta` and returns the delta that undoes it: figures
    /// negated, the records it closed opened again with the creation time
    /// they had, the ones it opened closed. A hub that shares its store
    /// keeps these for the writes it has not committed yet, since another
    /// hub's commit may send them back to be run again.
    public mutating func applyUndoably(_ delta: Delta) -> Delta {
        var inverse = Delta()
        for (stage, change) in delta.counts { inverse.counts[stage] = -change }
        for (stage, time) in delta.stageTime {
            inverse.stageTime[stage] = StageTime(totalMs: -time.totalMs, exits: -time.exits)
        }
        for name in delta.closed {
            if let created = open[name] { inverse.opened.append(OpenRecord(name: name.string, created: created)) }
        }
        for record in delta.opened { inverse.closed.insert(ByteKey(record.name)) }
        apply(delta)
        return inverse
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
