import TallyProtocol

/// The live aggregate of one workflow, published as its stats record:
/// records per stage, time spent per stage, the oldest open record, how
/// long the records in each open stage have waited there, and the records
/// that finished per hour over the last day.
///
/// The hub reads it back from the stats record it last wrote, with the open
/// records from the workflow's list (`init(restoring:open:workflow:)`:
/// O(open records), so a restart does not read every record the workflow
/// ever had), and recounts the records only when that record is missing or
/// does not fit the workflow as configured now. It then moves it by deltas,
/// each applied only when the change that caused it is accepted; the stats
/// record is written in the same atomic group as the change, so what is
/// read back always equals a recount.
///
/// Its size is a cost of every workflow write, so it stays bounded: per
/// open stage that holds records one number (the sum of the times they
/// entered it: the page draws their average wait from it as time passes,
/// with no write), and per terminal stage 24 hourly counts. Everything is a
/// function of the records' data (their histories), never of a hub's clock
/// or of when it replays another hub's change.
public struct WorkflowStats: Sendable, Equatable {
    public struct StageTime: Sendable, Equatable {
        public var totalMs: Int64 = 0
        public var exits: Int64 = 0
    }

    public struct OpenRecord: Sendable, Equatable {
        public var name: String
        public var created: Int64
        /// The record's stage and when it entered it (its history's last
        /// time), when known: they restore the waits per stage.
        public var stage: String?
        public var entered: Int64?

        public init(name: String, created: Int64, stage: String? = nil, entered: Int64? = nil) {
            self.name = name
            self.created = created
            self.stage = stage
            self.entered = entered
        }

        /// An open record as read from the store.
        public init(_ record: RecordState, in workflow: Workflow) {
            self.init(name: record.name, created: record.created,
                      stage: record.data[workflow.stageField]?.stringValue,
                      entered: WorkflowStats.entered(record.data, created: record.created))
        }
    }

    /// An hour (ms); `finished` counts per hour, from its start.
    public static let hourMs: Int64 = 3_600_000
    /// How many hours the stats record's `finished` holds: a day.
    public static let hoursKept = 24
    /// How many hours the running figures keep: two days before the newest
    /// finish, so a delete of the newest finishes still leaves a full day.
    static let hoursInMemory = 48

    public static func hour(of time: Int64) -> Int64 {
        let remainder = time % hourMs
        return time - (remainder < 0 ? remainder + hourMs : remainder)
    }

    /// What one accepted write group does to the stats.
    public struct Delta: Sendable, Equatable {
        public var counts: [String: Int] = [:]
        public var stageTime: [String: StageTime] = [:]
        public var opened: [OpenRecord] = []
        public var closed: Set<ByteKey> = []
        /// Per open stage, the change of the sum of its records' entry times.
        public var enteredSum: [String: Int64] = [:]
        /// Records that reached a terminal stage, per hour start and stage
        /// (negative for a finished record deleted).
        public var finished: [Int64: [String: Int64]] = [:]

        public init() {}

        mutating func wait(in stage: String, since entered: Int64) { enteredSum[stage, default: 0] &+= entered }
        mutating func stopWaiting(in stage: String, since entered: Int64) { enteredSum[stage, default: 0] &-= entered }

        mutating func finish(_ stage: String, at time: Int64, _ change: Int64 = 1) {
            finished[WorkflowStats.hour(of: time), default: [:]][stage, default: 0] += change
        }

        /// What a record as it is (`sign` 1) or as it was (-1) brings to
        /// the figures: its stage count, its wait, its stage times and its
        /// terminal entries.
        mutating func take(_ record: RecordState, in workflow: Workflow, _ sign: Int64) {
            guard let stage = record.data[workflow.stageField]?.stringValue else { return }
            counts[stage, default: 0] += Int(sign)
            if workflow.isOpen(stage) {
                let entered = WorkflowStats.entered(record.data, created: record.created)
                if sign > 0 {
                    opened.append(OpenRecord(name: record.name, created: record.created))
                    wait(in: stage, since: entered)
                } else {
                    closed.insert(ByteKey(record.name))
                    stopWaiting(in: stage, since: entered)
                }
            }
            for (stage, time) in WorkflowStats.stageTimes(of: record.data) {
                stageTime[stage, default: StageTime()].totalMs += sign * time.totalMs
                stageTime[stage, default: StageTime()].exits += sign * time.exits
            }
            for (stage, time) in WorkflowStats.finishes(of: record.data, in: workflow) { finish(stage, at: time, sign) }
        }

        mutating func enter(_ stage: String) { counts[stage, default: 0] += 1 }
        mutating func leave(_ stage: String) { counts[stage, default: 0] -= 1 }
        /// A deleted record's time leaves the figures, so they always equal
        /// a recount of the records there are.
        mutating func forget(_ data: JSONObject, in workflow: Workflow) {
            for (stage, time) in WorkflowStats.stageTimes(of: data) {
                stageTime[stage, default: StageTime()].totalMs -= time.totalMs
                stageTime[stage, default: StageTime()].exits -= time.exits
            }
            for (stage, time) in WorkflowStats.finishes(of: data, in: workflow) { finish(stage, at: time, -1) }
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
            if let before { take(before, in: workflow, -1) }
            if let after { take(after, in: workflow, 1) }
        }
    }

    public let stages: [String]
    /// The terminal stages, in stage order: they have finish counts, the
    /// others waits.
    public let terminal: [String]
    public private(set) var counts: [String: Int] = [:]
    public private(set) var stageTime: [String: StageTime] = [:]
    private var open: [ByteKey: Int64] = [:]
    public private(set) var oldest: OpenRecord?
    /// Per open stage: the sum of the entry times of the records in it
    /// (wrapping: exact while under ~5 million records wait in one stage).
    public private(set) var enteredSum: [String: Int64] = [:]
    /// Records that reached a terminal stage, per hour start and stage;
    /// hours older than two days before the newest are dropped.
    public private(set) var finished: [Int64: [String: Int64]] = [:]

    public init(workflow: Workflow) {
        stages = workflow.stages
        terminal = workflow.stages.filter { !workflow.isOpen($0) }
    }

    public var total: Int { counts.values.reduce(0, +) }

    /// The stats as `record(after:now:)` wrote them into `data`, with the
    /// workflow's open records (each with its creation time, and when known
    /// its stage and entry time, which give the waits), or nil when they do not fit
    /// `workflow` as configured now: a stage missing or extra, a figure
    /// that is not a whole number ≥ 0, a total that is not the sum of the
    /// counts, open records that are not exactly as many as the counts of
    /// the open stages say (or named twice, or in a stage whose count says
    /// otherwise), or hourly finish counts that are not 24 whole numbers ≥ 0
    /// per terminal stage. The caller then recounts. A record written
    /// before `finished` was kept has none: the counts start empty (and
    /// without the open records' stages, the waits are as written).
    public init?(restoring data: JSONObject, open: [OpenRecord], workflow: Workflow) {
        self.init(workflow: workflow)
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
        let known = open.allSatisfy { $0.stage != nil && $0.entered != nil }
        for stage in stages {
            guard let count = whole(countsObject[stage]) else { return nil }
            counts[stage] = Int(count)
            sum += count
            if workflow.isOpen(stage) { openCount += count }
            guard let time = times[stage] else { continue }
            guard case .object(let figures) = time, let totalMs = whole(figures["totalMs"]),
                  let exits = whole(figures["exits"]) else { return nil }
            if totalMs != 0 || exits != 0 { stageTime[stage] = StageTime(totalMs: totalMs, exits: exits) }
            // Open records without their stage (an older caller): the waits
            // as written.
            if !known, workflow.isOpen(stage), case .number(let n)? = figures["enteredSum"], let entered = n.int64Value {
                enteredSum[stage] = entered
            }
        }
        guard sum == total, openCount == Int64(open.count) else { return nil }
        var inStage: [String: Int] = [:]
        for record in open {
            guard self.open.updateValue(record.created, forKey: ByteKey(record.name)) == nil else { return nil }
            if oldest.map({ Self.older(record.created, record.name, than: $0) }) ?? true {
                oldest = OpenRecord(name: record.name, created: record.created)
            }
            if known, let stage = record.stage, let entered = record.entered {
                guard workflow.isOpen(stage), counts[stage] != nil else { return nil }
                inStage[stage, default: 0] += 1
                enteredSum[stage, default: 0] &+= entered
            }
        }
        if known {
            for stage in stages where workflow.isOpen(stage) {
                guard inStage[stage] ?? 0 == counts[stage] ?? 0 else { return nil }
            }
        }
        switch data["finished"] {
        case nil:
            break
        case .object(let figures)? where figures["hour"] == .null:
            for stage in terminal {
                guard case .array(let perHour)? = figures[stage], perHour.count == Self.hoursKept,
                      perHour.allSatisfy({ $0 == 0 }) else { return nil }
            }
        case .object(let figures)?:
            guard let hour = whole(figures["hour"]), hour % Self.hourMs == 0 else { return nil }
            for stage in terminal {
                guard case .array(let perHour)? = figures[stage], perHour.count == Self.hoursKept else { return nil }
                for (index, value) in perHour.enumerated() {
                    guard let count = whole(value) else { return nil }
                    if count > 0 { finished[hour - Int64(Self.hoursKept - 1 - index) * Self.hourMs, default: [:]][stage] = count }
                }
            }
        default:
            return nil
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
            enteredSum[stage, default: 0] &+= Self.entered(record.data, created: record.created)
        }
        for (stage, time) in Self.stageTimes(of: record.data) {
            stageTime[stage, default: StageTime()].totalMs += time.totalMs
            stageTime[stage, default: StageTime()].exits += time.exits
        }
        let finishes = Self.finishes(of: record.data, in: workflow)
        for (stage, time) in finishes { finished[Self.hour(of: time), default: [:]][stage, default: 0] += 1 }
        if !finishes.isEmpty, finished.count > 2 * Self.hoursInMemory { pruneFinished() }
    }

    /// Drops the hours older than two days before the newest one kept.
    private mutating func pruneFinished() {
        guard let newest = finished.keys.max() else { return }
        let first = newest - Int64(Self.hoursInMemory - 1) * Self.hourMs
        finished = finished.filter { $0.key >= first && !$0.value.isEmpty }
    }

    /// When a record entered its stage: its history's last time (the hub
    /// writes one entry per move), or its creation without a history.
    public static func entered(_ data: JSONObject, created: Int64) -> Int64 {
        guard case .array(let history)? = data["history"], case .object(let last)? = history.last,
              let time = last["time"]?.numberValue?.int64Value else { return created }
        return time
    }

    /// The times a record's history entered a terminal stage.
    static func finishes(of data: JSONObject, in workflow: Workflow) -> [(stage: String, time: Int64)] {
        guard case .array(let history)? = data["history"] else { return [] }
        var found: [(String, Int64)] = []
        for case .object(let entry) in history {
            guard let to = entry["to"]?.stringValue, !workflow.isOpen(to),
                  let time = entry["time"]?.numberValue?.int64Value else { continue }
            found.append((to, time))
        }
        return found
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
        for (stage, sum) in delta.enteredSum { inverse.enteredSum[stage] = 0 &- sum }
        for (hour, stages) in delta.finished { inverse.finished[hour] = stages.mapValues { -$0 } }
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

        for (stage, sum) in delta.enteredSum { enteredSum[stage, default: 0] &+= sum }
        if !delta.finished.isEmpty {
            for (hour, stages) in delta.finished {
                for (stage, change) in stages {
                    let count = (finished[hour]?[stage] ?? 0) + change
                    finished[hour, default: [:]][stage] = count == 0 ? nil : count
                }
                if finished[hour]?.isEmpty == true { finished[hour] = nil }
            }
            pruneFinished()
        }
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

    /// The stats record's data after `delta`. `finished` holds the day that
    /// ends with the newest hour with a finish (from the records' histories,
    /// not the hub's clock, so every hub and a recount write the same).
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
            var figures: JSONObject = [
                "totalMs": .number(JSONNumber(time.totalMs)), "exits": .number(JSONNumber(time.exits)),
                "averageMs": .number(JSONNumber(time.exits > 0 ? time.totalMs / time.exits : 0)),
            ]
            if count > 0, !terminal.contains(stage) {
                figures["enteredSum"] = .number(JSONNumber((enteredSum[stage] ?? 0) &+ (delta.enteredSum[stage] ?? 0)))
            }
            timeObject[stage] = .object(figures)
        }
        let oldestOpen: JSONValue = oldest(after: delta).map {
            .object(["name": .string($0.name), "created": .number(JSONNumber($0.created))])
        } ?? .null
        var data: JSONObject = ["counts": .object(countsObject), "total": .number(JSONNumber(total)),
                                "stageTime": .object(timeObject), "oldestOpen": oldestOpen]
        if !terminal.isEmpty {
            var hours = finished
            for (hour, stages) in delta.finished {
                for (stage, change) in stages {
                    let count = (hours[hour]?[stage] ?? 0) + change
                    hours[hour, default: [:]][stage] = count == 0 ? nil : count
                }
                if hours[hour]?.isEmpty == true { hours[hour] = nil }
            }
            let newest = hours.keys.max()
            let last = newest ?? 0
            var finishedObject: JSONObject = ["hour": newest.map { .number(JSONNumber($0)) } ?? .null]
            for stage in terminal {
                var perHour: [JSONValue] = []
                perHour.reserveCapacity(Self.hoursKept)
                for index in 0..<Self.hoursKept {
                    let hour = last - Int64(Self.hoursKept - 1 - index) * Self.hourMs
                    perHour.append(.number(JSONNumber(newest == nil ? 0 : hours[hour]?[stage] ?? 0)))
                }
                finishedObject[stage] = .array(perHour)
            }
            data["finished"] = .object(finishedObject)
        }
        data["updated"] = .number(JSONNumber(now))
        return data
    }
}
