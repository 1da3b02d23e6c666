import Testing
@testable import TallyEngine
import TallyProtocol

/// Plans and applies writes the way the hub core does: planner, engine,
/// then the stats deltas once the group is accepted.
final class WorkflowHarness {
    let planner: WorkflowPlanner
    let engine = Engine()
    var state = DictState()
    var stats: [String: WorkflowStats] = [:]
    var headSeq: Int64 = 0
    var now: Int64 = 1_764_460_800_000

    init(planner: WorkflowPlanner = WorkflowPlanner()) { self.planner = planner }

    @discardableResult
    func apply(_ writes: [Write], as actor: Actor, atomic: Bool = false) throws(ProtocolError) -> [Change] {
        let plan = try planner.plan(writes, atomic: atomic, actor: actor, state: &state, now: now, stats: stats)
        let changes = try engine.apply(plan.writes, atomic: atomic, origins: plan.origins, to: &state,
                                       firstSeq: headSeq + 1, now: now)
        for (prefix, delta) in plan.deltas {
            var current = stats[prefix] ?? WorkflowStats(workflow: planner.workflows.workflow(prefix: prefix)!)
            current.apply(delta)
            stats[prefix] = current
        }
        state.commit(changes)
        headSeq += Int64(changes.count)
        now += 1000
        return changes
    }

    /// The error, checking that the refusal changed nothing.
    func error(_ writes: [Write], as actor: Actor, atomic: Bool = false) -> ProtocolError? {
        let before = (state, stats)
        do {
            try apply(writes, as: actor, atomic: atomic)
            return nil
        } catch {
            #expect(state == before.0 && stats == before.1, "a refused write changed something")
            return error
        }
    }

    func data(_ name: String) -> JSONObject? { state.record(named: name)?.data }

    /// A record that was there before, with no change, seq or time spent
    /// (an order's item, for tests that count seqs and times).
    func put(_ name: String, _ data: JSONObject) {
        state.records[Array(name.utf8)] = RecordState(name: name, version: 1, seq: 0, created: now, updated: now, data: data,
                                                      dataBytes: JSONValue.object(data).serialized())
    }
    func stage(_ name: String) -> String? { data(name)?["stage"]?.stringValue }

    /// Counts stages over every record under `prefix`, as a dashboard would.
    func recount(_ prefix: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        for record in state.records.values where record.name.hasPrefix(prefix) {
            counts[record.data["stage"]!.stringValue!, default: 0] += 1
        }
        return counts
    }
}

let admin = Actor(user: "root", role: "admin")
let staff = Actor(user: "ana", role: "staff")
let board = Actor(user: "wall", role: "dashboard")
let customer = Actor(user: "cleo", role: "client")

func order(_ item: String = "items/drill", qty: Int = 2, kind: String = "issue") -> JSONObject {
    ["item": .string(item), "qty": .number(JSONNumber(qty)), "kind": .string(kind)]
}

func advance(_ name: String, to: String? = nil, from: String? = nil, reason: String? = nil) -> Write {
    Write(name: name, action: .advance(Advance(from: from, to: to, reason: reason)))
}

@Suite("Workflows: stages, history, stats, stock")
struct WorkflowTests {
    @Test func creatingAnOrderStampsItAndListsIt() throws {
        let hub = WorkflowHarness()
        hub.put("items/drill", ["stock": 100])
        try hub.apply([Write(name: "orders/1", action: .set(order()))], as: staff)
        let data = try #require(hub.data("orders/1"))
        #expect(data["stage"] == "received")
        #expect(data["owner"] == "ana")
        #expect(data["history"] == .array([.object(["time": .number(JSONNumber(1_764_460_800_000)), "actor": "ana",
                                                     "from": .null, "to": "received"])]))
        #expect(hub.state.entries(named: "orders") == ["orders/1"])
        let stats = try #require(hub.data("stats/orders"))
        #expect(stats["counts"]?.objectValue?["received"] == 1)
        #expect(stats["total"] == 1)
        #expect(stats["oldestOpen"]?.objectValue?["name"] == "orders/1")
    }

    @Test func everyTransitionIsCheckedAgainstTheGraph() throws {
        for flow in [Workflow.orders, Workflow.intake] {
            for from in flow.stages {
                for to in flow.stages {
                    let hub = WorkflowHarness()
                    let name = flow.prefix + "r"
                    var data: JSONObject = flow.kind == .order ? order() : [:]
                    data["x"] = 1
                    try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
                    try hub.apply([Write(name: name, action: .set(data))], as: admin)
                    // Walk to `from` along allowed edges (breadth-first).
                    let route = Self.route(flow, to: from)
                    for step in route { try hub.apply([advance(name, to: step, reason: "r")], as: admin) }
                    #expect(hub.stage(name) == from)
                    let allowed = flow.allowed(from: from).contains(to)
                    let error = hub.error([advance(name, to: to, reason: "because")], as: staff)
                    if allowed {
                        #expect(error == nil, "\(flow.prefix) \(from)->\(to): \(String(describing: error))")
                        #expect(hub.stage(name) == to)
                    } else {
                        #expect(error?.code == .illegalTransition, "\(flow.prefix) \(from)->\(to)")
                        #expect(error?.details["allowed"] == .array(flow.allowed(from: from).map(JSONValue.string)))
                    }
                    // Read-only and client roles may make no transition at all.
                    for actor in [board, customer] where allowed {
                        let hub2 = WorkflowHarness()
                        try hub2.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
                        try hub2.apply([Write(name: name, action: .set(data))], as: admin)
                        for step in route { try hub2.apply([advance(name, to: step, reason: "r")], as: admin) }
                        #expect(hub2.error([advance(name, to: to, reason: "because")], as: actor)?.code == .forbidden)
                    }
                }
            }
        }
    }

    static func route(_ flow: Workflow, to target: String) -> [String] {
        var paths: [String: [String]] = [flow.initial: []]
        var queue = [flow.initial]
        while !queue.isEmpty {
            let stage = queue.removeFirst()
            for next in flow.allowed(from: stage) where paths[next] == nil {
                paths[next] = paths[stage]! + [next]
                queue.append(next)
            }
        }
        return paths[target]!
    }

    @Test func historyStatsAndConflicts() throws {
        let hub = WorkflowHarness()
        hub.put("items/drill", ["stock": 100])
        try hub.apply([Write(name: "orders/1", action: .set(order()))], as: staff)
        let changes = try hub.apply([advance("orders/1", from: "received")], as: staff)
        #expect(hub.stage("orders/1") == "in-progress")
        #expect(changes.map(\.name) == ["orders/1", "stats/orders"])
        #expect(changes[0].reply["from"] == nil, "extras are added by the hub core, not the engine")
        let history = try #require(hub.data("orders/1")?["history"]?.arrayValue)
        #expect(history.last == .object(["time": .number(JSONNumber(1_764_460_801_000)), "actor": "ana",
                                         "from": "received", "to": "in-progress"]))
        let stats = try #require(hub.data("stats/orders"))
        #expect(stats["stageTime"]?.objectValue?["received"] == .object(["totalMs": 1000, "exits": 1, "averageMs": 1000]))
        // A stale client that still thinks the order is received.
        let stale = hub.error([advance("orders/1", to: "cancelled", from: "received")], as: staff)
        #expect(stale?.code == .conflict)
        #expect(stale?.details["stage"] == "in-progress")
    }

    @Test func plainWritesCannotMoveTheStage() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .set(order()))], as: staff)
        var moved = order()
        moved["stage"] = "delivered"
        #expect(hub.error([Write(name: "orders/1", action: .set(moved))], as: admin)?.code == .useAdvance)
        #expect(hub.error([Write(name: "orders/1", action: .setPath(path("stage"), "ready"))], as: admin)?.code == .useAdvance)
        #expect(hub.error([Write(name: "orders/1", action: .merge(["history": []]))], as: admin)?.code == .useAdvance)
        #expect(hub.error([Write(name: "orders/1", action: .set(["item": "items/drill", "qty": 1, "stage": "ready"]))],
                          as: admin)?.code == .useAdvance)
        // A whole-record set that leaves them out keeps them.
        try hub.apply([Write(name: "orders/1", action: .set(order(qty: 5)))], as: staff)
        #expect(hub.stage("orders/1") == "received")
        #expect(hub.data("orders/1")?["qty"] == 5)
        #expect(hub.data("orders/1")?["owner"] == "ana")
        // Bad order fields name the field.
        #expect(hub.error([Write(name: "orders/2", action: .set(["item": "drill", "qty": 1]))], as: staff)?.details["field"] == "item")
        #expect(hub.error([Write(name: "orders/2", action: .set(order(qty: 0)))], as: staff)?.details["field"] == "qty")
        #expect(hub.error([Write(name: "orders/2", action: .set(order(kind: "steal")))], as: staff)?.details["field"] == "kind")
        #expect(hub.error([Write(name: "orders/1", action: .setPath(path("qty"), -1))], as: staff)?.details["field"] == "qty")
        #expect(hub.error([Write(name: "stats/orders", action: .set([:]))], as: admin)?.code == .forbidden)
    }

    @Test func deliveryMovesStockAtomicallyAndNeverBelowZero() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 3]))], as: admin)
        try hub.apply([Write(name: "orders/big", action: .set(order(qty: 5)))], as: staff)
        try hub.apply([Write(name: "orders/small", action: .set(order(qty: 2)))], as: staff)
        try hub.apply([Write(name: "orders/in", action: .set(order(qty: 4, kind: "receive")))], as: staff)
        for name in ["orders/big", "orders/small", "orders/in"] {
            try hub.apply([advance(name)], as: staff)
            try hub.apply([advance(name)], as: staff)
        }
        let refused = hub.error([advance("orders/big", to: "delivered")], as: staff)
        #expect(refused?.code == .insufficientStock)
        #expect(refused?.details["stock"] == 3 && refused?.details["needed"] == 5 && refused?.details["item"] == "items/drill")
        #expect(hub.stage("orders/big") == "ready")
        let changes = try hub.apply([advance("orders/small", to: "delivered")], as: staff)
        #expect(changes.map(\.name) == ["orders/small", "items/drill", "orders", "stats/orders"])
        #expect(Set(changes.map(\.seq)).count == 4)
        #expect(hub.data("items/drill")?["stock"] == 1)
        try hub.apply([advance("orders/in", to: "delivered")], as: staff)
        #expect(hub.data("items/drill")?["stock"] == 5)
        try hub.apply([advance("orders/big", to: "delivered")], as: staff)
        #expect(hub.data("items/drill")?["stock"] == 0)
        #expect(hub.data("stats/orders")?["oldestOpen"] == .null)
        // Two deliveries of the same item in one atomic write see each other.
        try hub.apply([Write(name: "items/saw", action: .set(["stock": 3]))], as: admin)
        for name in ["orders/s1", "orders/s2"] {
            try hub.apply([Write(name: name, action: .set(order("items/saw", qty: 2)))], as: staff)
            try hub.apply([advance(name)], as: staff)
            try hub.apply([advance(name)], as: staff)
        }
        let both = hub.error([advance("orders/s1", to: "delivered"), advance("orders/s2", to: "delivered")], as: staff, atomic: true)
        #expect(both?.code == .insufficientStock)
        #expect(both?.details["index"] == 1)
    }

    @Test func statsEqualARecountAfterRandomTransitions() throws {
        let hub = WorkflowHarness()
        var generator = PathReplayTests.Generator(state: 42)
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 1_000_000]))], as: admin)
        let names = (0..<40).map { "orders/\($0)" }
        for name in names { try hub.apply([Write(name: name, action: .set(order()))], as: staff) }
        let stages = Workflow.orders.stages
        for _ in 0..<1000 {
            let name = names.randomElement(using: &generator)!
            let to = stages.randomElement(using: &generator)!
            _ = hub.error([advance(name, to: to)], as: staff)
            if Int.random(in: 0..<50, using: &generator) == 0 {
                _ = hub.error([Write(name: name, action: .delete)], as: admin)
            }
        }
        let stats = try #require(hub.data("stats/orders"))
        let recount = hub.recount("orders/")
        for stage in stages {
            #expect(stats["counts"]?.objectValue?[stage] == .number(JSONNumber(recount[stage] ?? 0)), "\(stage)")
        }
        #expect(stats["total"] == .number(JSONNumber(recount.values.reduce(0, +))))
        // A fresh recount from the records gives the same figures.
        var fresh = WorkflowStats(workflow: .orders)
        for record in hub.state.records.values where record.name.hasPrefix("orders/") { fresh.count(record, in: .orders) }
        #expect(fresh.record(after: .init(), now: 0)["counts"] == stats["counts"])
        #expect(fresh.record(after: .init(), now: 0)["stageTime"] == stats["stageTime"])
        #expect(fresh.record(after: .init(), now: 0)["oldestOpen"] == stats["oldestOpen"])
        // The list holds the open orders, in the order they were made.
        let open = names.filter { hub.stage($0).map(Workflow.orders.isOpen) == true }
        #expect(hub.state.entries(named: "orders") == open)
    }

    /// Without this, the list held every order ever made: each new order
    /// rewrote a list that only grew (memory, storage and time per write in
    /// proportion to the orders before it), and the 100,001st was refused.
    @Test func theListHoldsOpenRecordsOnly() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 1_000_000]))], as: admin)
        for round in 0..<300 {
            let name = "orders/\(round)"
            try hub.apply([Write(name: name, action: .set(order(qty: 1)))], as: staff)
            if round % 10 == 9 { continue }   // one in ten stays open
            try hub.apply([advance(name)], as: staff)
            if round % 10 == 8 {
                let changes = try hub.apply([advance(name, to: "cancelled")], as: staff)
                #expect(changes.map(\.name) == [name, "orders", "stats/orders"])
                continue
            }
            try hub.apply([advance(name)], as: staff)
            try hub.apply([advance(name)], as: staff)
        }
        #expect(hub.state.entries(named: "orders") == (0..<30).map { "orders/\($0 * 10 + 9)" })
        // Deleting an open order takes it off too; a terminal one is already off.
        try hub.apply([Write(name: "orders/9", action: .delete)], as: admin)
        try hub.apply([Write(name: "orders/0", action: .delete)], as: admin)
        #expect(hub.state.entries(named: "orders")?.first == "orders/19")
        // Intake jobs leave theirs when done or failed.
        try hub.apply([Write(name: "intake/a", action: .set([:]))], as: staff)
        try hub.apply([Write(name: "intake/b", action: .set([:]))], as: staff)
        try hub.apply([advance("intake/a", to: "failed", reason: "blurred")], as: staff)
        #expect(hub.state.entries(named: "intake") == ["intake/b"])
    }

    @Test func intakeNeedsAReasonToFailAndHoldsTwelvePhotos() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "intake/j1", action: .set(["item": "items/x"]))], as: staff)
        #expect(hub.stage("intake/j1") == "queued")
        #expect(hub.error([advance("intake/j1", to: "failed")], as: staff)?.details["field"] == "reason")
        let photos = JSONValue.array((0..<13).map { .string("p\($0)") })
        #expect(hub.error([Write(name: "intake/j1", action: .merge(["photos": photos]))], as: staff)?.details["field"] == "photos")
        try hub.apply([advance("intake/j1", to: "failed", reason: "camera broke")], as: staff)
        #expect(hub.data("intake/j1")?["reason"] == "camera broke")
    }

    @Test func workflowRecordsChangeOncePerWrite() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
        let error = hub.error([Write(name: "orders/1", action: .set(order())), advance("orders/1")], as: staff, atomic: true)
        #expect(error?.code == .badField)
        #expect(error?.details["index"] == 1)
    }
}

@Suite("Access rules")
struct AccessTests {
    @Test func patterns() {
        #expect(NamePattern("**").matches("a/b/c"))
        #expect(NamePattern("orders/*").matches("orders/1"))
        #expect(!NamePattern("orders/*").matches("orders/1/x"))
        #expect(!NamePattern("orders/*").matches("orders"))
        #expect(NamePattern("orders/**").matches("orders/1/x"))
        #expect(NamePattern("*/x/**").matches("a/x/b"))
        #expect(!NamePattern("*/x/**").matches("a/b/x/c"))
        #expect(NamePattern("orders/**").covers(prefix: "orders/"))
        #expect(NamePattern("orders/**").covers(prefix: "orders/12"))
        #expect(!NamePattern("orders/**").covers(prefix: "ord"))
        #expect(!NamePattern("orders/*").covers(prefix: "orders/"))
        #expect(NamePattern("**").covers(prefix: ""))
    }

    @Test func clientsCreateOrdersAndSeeOnlyTheirOwn() throws {
        let hub = WorkflowHarness()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 100]))], as: admin)
        try hub.apply([Write(name: "orders/mine", action: .set(order()))], as: customer)
        try hub.apply([Write(name: "orders/theirs", action: .set(order()))], as: staff)
        let policy = AccessPolicy()
        #expect(throws: Never.self) { try policy.check(customer, .read, name: "orders/mine", owner: "cleo") }
        #expect(throws: ProtocolError.self) { try policy.check(customer, .read, name: "orders/theirs", owner: "ana") }
        #expect(policy.decide(customer, .subscribe, prefix: "orders/") == .denied)
        #expect(policy.decide(customer, .read, name: "items/drill") == .allowed)
        #expect(hub.error([Write(name: "orders/mine", action: .setPath(path("qty"), 3))], as: customer)?.code == .forbidden)
        #expect(hub.error([Write(name: "items/drill", action: .set([:]))], as: customer)?.code == .forbidden)
        #expect(hub.error([Write(name: "notes/x", action: .set([:]))], as: board)?.code == .forbidden)
        #expect(hub.error([Write(name: "orders/mine", action: .delete)], as: staff)?.code == .forbidden)
        try hub.apply([Write(name: "orders/mine", action: .delete)], as: admin)
        #expect(hub.state.entries(named: "orders") == ["orders/theirs"])
        #expect(hub.data("stats/orders")?["total"] == 1)
    }
}

@Suite("Workflows: an advance's data and the write rule")
struct AdvanceDataAccessTests {
    /// The README's example role: reads orders, may make one transition.
    static func packerHub() -> WorkflowHarness {
        var policy = AccessPolicy()
        policy.roles["packer"] = [AccessRule("orders/**", [.read, .subscribe]), AccessRule("items/**", [.read, .write])]
        var orders = Workflow.orders
        orders.roles["in-progress->ready"] = ["admin", "staff", "packer"]
        return WorkflowHarness(planner: WorkflowPlanner(workflows: WorkflowSet([orders, .intake]), policy: policy))
    }

    @Test func aPatchThatChangesFieldsNeedsWrite() throws {
        let hub = Self.packerHub()
        let packer = Actor(user: "pat", role: "packer")
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 10]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .set(order(qty: 2)))], as: admin)
        try hub.apply([advance("orders/1", to: "in-progress")], as: admin)
        let patched = Write(name: "orders/1", action: .advance(Advance(to: "ready", data: ["qty": 9])))
        let error = try #require(hub.error([patched], as: packer))
        #expect(error.code == .forbidden)
        #expect(error.details["operation"] == "write")
        #expect(hub.data("orders/1")?["qty"] == 2)
        // A patch that changes nothing is no write; no patch at all moves the stage.
        let same = Write(name: "orders/1", action: .advance(Advance(to: "ready", data: ["qty": 2])))
        try hub.apply([same], as: packer)
        #expect(hub.stage("orders/1") == "ready")
        #expect(hub.data("orders/1")?["qty"] == 2)
    }

    @Test func rolesThatMayWriteStillPatch() throws {
        let hub = Self.packerHub()
        try hub.apply([Write(name: "items/drill", action: .set(["stock": 10]))], as: admin)
        try hub.apply([Write(name: "orders/1", action: .set(order(qty: 2)))], as: staff)
        try hub.apply([Write(name: "orders/1", action: .advance(Advance(to: "in-progress", data: ["qty": 3])))], as: staff)
        #expect(hub.data("orders/1")?["qty"] == 3)
    }
}
