import TallyProtocol

/// What the hub applies for a client's writes once permissions and
/// workflows have had their say: the writes themselves (workflow records
/// stamped, `advance` turned into a plain set), plus what they imply —
/// stock moved, the record listed, the stats records rewritten — all in one
/// atomic group.
public struct WorkflowPlan: Sendable {
    public var writes: [Write] = []
    /// For every planned write, the index of the client's write it came from
    /// (errors are reported against that one).
    public var origins: [Int] = []
    /// For every client write, the index of its own planned write (its reply).
    public var primaries: [Int] = []
    /// Reply members added to a client write's reply (`advance`: from, to).
    public var replyExtras: [Int: JSONObject] = [:]
    /// Stats changes per workflow prefix, to apply once the group is accepted.
    public var deltas: [String: WorkflowStats.Delta] = [:]
    /// The indexes of the planned record writes under `items/`: what an
    /// order made later in the group reads its item through.
    var itemWrites: [Int] = []

    mutating func add(_ write: Write, origin: Int) {
        if !write.isListWrite, write.name.hasBytePrefix(WorkflowPlanner.itemPrefix) { itemWrites.append(writes.count) }
        writes.append(write)
        origins.append(origin)
    }
}

/// Applies the access rules and the workflows to a client's writes. Pure:
/// it reads the state and the stats, and returns a plan.
public struct WorkflowPlanner: Sendable {
    public let workflows: WorkflowSet
    public let policy: AccessPolicy

    public init(workflows: WorkflowSet = .defaults, policy: AccessPolicy = AccessPolicy()) {
        self.workflows = workflows
        self.policy = policy
    }

    /// `stats` holds the current stats per workflow prefix (the hub recounts
    /// them before the first write that needs them; see `prefixes(of:)`).
    public func plan(_ writes: [Write], atomic: Bool, actor: Actor, state: inout some EngineState, now: Int64,
                     stats: [String: WorkflowStats]) throws(ProtocolError) -> WorkflowPlan {
        var plan = WorkflowPlan()
        plan.writes.reserveCapacity(writes.count)
        plan.origins.reserveCapacity(writes.count)
        plan.primaries.reserveCapacity(writes.count)
        var touched = Set<ByteKey>()
        var statsOrigin: [String: Int] = [:]
        for (index, write) in writes.enumerated() {
            do throws(ProtocolError) {
                if workflows.isHubOwned(write.name) {
                    let operation: JSONValue = switch write.action { case .delete, .deleteList: "delete"; default: "write" }
                    throw ProtocolError(.forbidden, "\"\(write.name)\" is kept by the hub (records under \(WorkflowSet.statsPrefix) change with their workflows' records)",
                                        details: ["role": .string(actor.role), "operation": operation, "name": .string(write.name)])
                }
                if write.checkStock, workflows.workflow(for: write.name)?.kind != .order {
                    throw ProtocolError(.badField, "\"checkStock\" applies to creating an order; \"\(write.name)\" is not under a workflow of kind order",
                                        details: ["field": "checkStock"])
                }
                guard !write.isListWrite, let workflow = workflows.workflow(for: write.name) else {
                    try checkPlain(write, actor: actor, state: &state)
                    plan.primaries.append(plan.writes.count)
                    plan.add(write, origin: index)
                    continue
                }
                guard touched.insert(ByteKey(write.name)).inserted else {
                    throw ProtocolError(.badField, "\"\(write.name)\" is a workflow record and may change once per write; send the changes separately",
                                        details: ["field": "name"])
                }
                let current = try state.record(write.name)
                var delta = plan.deltas[workflow.prefix] ?? WorkflowStats.Delta()
                try planWorkflow(write, index: index, workflow: workflow, current: current, actor: actor,
                                 state: &state, now: now, delta: &delta, plan: &plan)
                plan.deltas[workflow.prefix] = delta
                statsOrigin[workflow.prefix] = index
            } catch {
                var error = error
                if atomic {
                    error.details["index"] = .number(JSONNumber(index))
                    if case .string(let field)? = error.details["field"] {
                        error.details["field"] = .string("ops[\(index)].\(field)")
                    }
                }
                throw error
            }
        }
        for (prefix, delta) in plan.deltas {
            guard let workflow = workflows.workflow(prefix: prefix), let name = workflow.stats else { continue }
            let data = (stats[prefix] ?? WorkflowStats(workflow: workflow)).record(after: delta, now: now)
            plan.add(Write(name: name, action: .set(data)), origin: statsOrigin[prefix] ?? 0)
        }
        return plan
    }

    /// The workflows `writes` touch, whose stats the plan will need.
    public func workflows(touchedBy writes: [Write]) -> [Workflow] {
        var found: [Workflow] = []
        for write in writes where !write.isListWrite {
            if let flow = workflows.workflow(for: write.name), !found.contains(where: { $0.prefix == flow.prefix }) {
                found.append(flow)
            }
        }
        return found
    }

    // MARK: Plain records and lists

    private func checkPlain(_ write: Write, actor: Actor, state: inout some EngineState) throws(ProtocolError) {
        let permission: Permission
        switch write.action {
        case .delete, .deleteList:
            permission = .delete
        case .deletePath, .removeEntry:
            permission = .write
        case .set, .setPath, .merge, .increment, .addEntry, .setEntries:
            // Create or write, by whether it exists; when the role may do
            // both, the lookup is not needed.
            if policy.decide(actor, .create, name: write.name) == .allowed,
               policy.decide(actor, .write, name: write.name) == .allowed { return }
            let exists = write.isListWrite ? try state.list(write.name) != nil : try state.record(write.name) != nil
            permission = exists ? .write : .create
        case .advance, .boundedIncrement:
            permission = .write
        }
        switch policy.decide(actor, permission, name: write.name) {
        case .allowed: return
        case .ifOwner:
            let owner = write.isListWrite ? nil : try state.record(write.name)?.data["owner"]?.stringValue
            if owner == actor.user { return }
            throw AccessPolicy.denied(actor, permission, name: write.name, ownOnly: true)
        case .denied:
            throw AccessPolicy.denied(actor, permission, name: write.name)
        }
    }

    // MARK: Workflow records

    private func planWorkflow(_ write: Write, index: Int, workflow: Workflow, current: RecordState?, actor: Actor,
                              state: inout some EngineState, now: Int64, delta: inout WorkflowStats.Delta,
                              plan: inout WorkflowPlan) throws(ProtocolError) {
        let name = write.name
        let owner = current?.data["owner"]?.stringValue
        func require(_ permission: Permission) throws(ProtocolError) {
            try policy.check(actor, permission, name: name, owner: owner)
        }
        switch write.action {
        case .advance(let step):
            // A role that may make no transition learns nothing about the record.
            guard workflow.mayAdvance(actor.role) else {
                throw ProtocolError(.forbidden, "role \"\(actor.role)\" may not advance \"\(name)\": no \"\(workflow.prefix)\" transition allows it",
                                    details: ["role": .string(actor.role), "operation": "advance", "name": .string(name)])
            }
            guard let current else { throw ProtocolError(.notFound, "no record named \"\(name)\"") }
            try advance(write, step: step, index: index, workflow: workflow, current: current, actor: actor,
                        state: &state, now: now, delta: &delta, plan: &plan)
        case .set(let data) where current == nil:
            try policy.check(actor, .create, name: name, owner: actor.user)
            var data = data
            if let stage = data[workflow.stageField], stage != .string(workflow.initial) {
                throw ProtocolError(.useAdvance, "a new \"\(workflow.prefix)\" record starts at \"\(workflow.initial)\"; move it on with advance",
                                    details: ["field": .string(workflow.stageField)])
            }
            try validate(&data, workflow: workflow)
            if workflow.kind == .order {
                try checkNewOrder(data, name: name, checkStock: write.checkStock, state: &state, plan: plan)
            }
            data[workflow.stageField] = .string(workflow.initial)
            data["history"] = .array([.object(["time": .number(JSONNumber(now)), "actor": .string(actor.user),
                                               "from": .null, "to": .string(workflow.initial)])])
            data["owner"] = .string(actor.user)
            plan.primaries.append(plan.writes.count)
            plan.add(Write(name: name, action: .set(data), baseVersion: write.baseVersion), origin: index)
            if let list = workflow.list {
                plan.add(Write(name: list, action: .addEntry(name, at: nil)), origin: index)
            }
            delta.enter(workflow.initial)
            if workflow.isOpen(workflow.initial) {
                delta.opened.append(.init(name: name, created: now))
                delta.wait(in: workflow.initial, since: now)
            } else {
                delta.finish(workflow.initial, at: now)
            }
        case .set(let data):
            try require(.write)
            var data = data
            for field in workflow.protectedFields {
                guard let value = data[field] else { data[field] = current?.data[field]; continue }
                guard value == current?.data[field] else { throw Self.useAdvance(field, workflow: workflow) }
            }
            try validate(&data, workflow: workflow)
            try checkItemKept(data, before: current?.data, name: name, workflow: workflow, state: &state, plan: plan)
            plan.primaries.append(plan.writes.count)
            plan.add(Write(name: name, action: .set(data), baseVersion: write.baseVersion), origin: index)
        case .merge(let patch):
            try require(.write)
            for field in workflow.protectedFields {
                if let value = patch[field], value != current?.data[field] { throw Self.useAdvance(field, workflow: workflow) }
            }
            if let current {
                var merged = current.data.mergePatched(with: patch)
                try validate(&merged, workflow: workflow)
                try checkItemKept(merged, before: current.data, name: name, workflow: workflow, state: &state, plan: plan)
            }
            plan.primaries.append(plan.writes.count)
            plan.add(write, origin: index)
        case .setPath(let path, _), .deletePath(let path), .increment(let path, _):
            guard current != nil else {
                throw ProtocolError(.notFound, "no record named \"\(name)\"; create a \"\(workflow.prefix)\" record with a whole-record set")
            }
            try require(.write)
            if case .key(let key)? = path.segments.first, workflow.protectedFields.contains(key) {
                throw Self.useAdvance(key, workflow: workflow)
            }
            // The domain fields must stay valid (delivery reads an order's
            // item, qty and kind; an intake job holds at most 12 photos).
            if var after = Self.simulate(write.action, on: current!.data) {
                try validate(&after, workflow: workflow)
                try checkItemKept(after, before: current?.data, name: name, workflow: workflow, state: &state, plan: plan)
            }
            plan.primaries.append(plan.writes.count)
            plan.add(write, origin: index)
        case .delete:
            guard let current else { throw ProtocolError(.notFound, "no record named \"\(name)\"") }
            try require(.delete)
            guard workflow.deleteRoles.contains(actor.role) else {
                throw ProtocolError(.forbidden, "role \"\(actor.role)\" may not delete \"\(name)\": deleting \"\(workflow.prefix)\" records needs \(Self.list(workflow.deleteRoles.sorted()))",
                                    details: ["role": .string(actor.role), "operation": "delete", "name": .string(name)])
            }
            plan.primaries.append(plan.writes.count)
            plan.add(write, origin: index)
            try unlist(name, workflow: workflow, index: index, state: &state, plan: &plan)
            delta.forget(current.data, in: workflow)
            if let stage = current.data[workflow.stageField]?.stringValue {
                delta.leave(stage)
                if workflow.isOpen(stage) {
                    delta.closed.insert(ByteKey(name))
                    delta.stopWaiting(in: stage, since: WorkflowStats.entered(current.data, created: current.created))
                }
            }
        case .addEntry, .removeEntry, .setEntries, .deleteList, .boundedIncrement:
            throw ProtocolError(.badField, "\"\(name)\" is a workflow record", details: ["field": "op"])
        }
    }

    private func advance(_ write: Write, step: Advance, index: Int, workflow: Workflow, current: RecordState,
                         actor: Actor, state: inout some EngineState, now: Int64,
                         delta: inout WorkflowStats.Delta, plan: inout WorkflowPlan) throws(ProtocolError) {
        let name = write.name
        guard let stage = current.data[workflow.stageField]?.stringValue else {
            throw ProtocolError(.badField, "\"\(name)\" has no \"\(workflow.stageField)\" to advance from", details: ["field": "name"])
        }
        if let from = step.from, from != stage {
            throw ProtocolError(.conflict, "\"\(name)\" is at \"\(stage)\", not \"\(from)\"; read it again and retry",
                                details: ["name": .string(name), "stage": .string(stage),
                                          "version": .number(JSONNumber(current.version))])
        }
        let allowed = workflow.allowed(from: stage)
        guard let to = step.to ?? allowed.first, allowed.contains(to) else {
            let target = step.to.map { "to \"\($0)\"" } ?? "any further"
            let options = allowed.isEmpty ? "\"\(stage)\" is terminal" : "allowed: \(Self.list(allowed))"
            throw ProtocolError(.illegalTransition, "\"\(name)\" cannot go from \"\(stage)\" \(target); \(options)",
                                details: ["name": .string(name), "from": .string(stage),
                                          "to": step.to.map(JSONValue.string) ?? .null,
                                          "allowed": .array(allowed.map(JSONValue.string))])
        }
        let roles = workflow.roles(from: stage, to: to)
        guard roles.contains(actor.role) else {
            throw ProtocolError(.forbidden, "role \"\(actor.role)\" may not move \"\(name)\" from \"\(stage)\" to \"\(to)\"; that needs \(Self.list(roles.sorted()))",
                                details: ["role": .string(actor.role), "operation": "advance", "name": .string(name),
                                          "from": .string(stage), "to": .string(to)])
        }
        if workflow.reasonRequired.contains(to), step.reason == nil {
            throw ProtocolError(.badField, "moving to \"\(to)\" needs a \"reason\"", details: ["field": "reason"])
        }
        var data = current.data
        if let patch = step.data {
            for field in workflow.protectedFields where patch[field] != nil {
                throw ProtocolError(.badField, "\"data\" may not set \"\(field)\"; the hub writes it", details: ["field": "data"])
            }
            data = data.mergePatched(with: patch)
            // The transition's roles say who may move the stage, not who may
            // change the record's fields: a patch that changes them needs
            // the write rule a plain write would (an order's qty drives the
            // stock move on delivery).
            if data != current.data, (try? policy.check(actor, .write, name: name, owner: current.owner)) == nil {
                throw ProtocolError(.forbidden, "role \"\(actor.role)\" may move \"\(name)\" to \"\(to)\" but not change its fields: \"data\" needs write on \"\(name)\"; advance without data",
                                    details: ["role": .string(actor.role), "operation": "write", "name": .string(name)])
            }
            try validate(&data, workflow: workflow)
            try checkItemKept(data, before: current.data, name: name, workflow: workflow, state: &state, plan: plan)
        }
        data[workflow.stageField] = .string(to)
        var entry: JSONObject = ["time": .number(JSONNumber(now)), "actor": .string(actor.user),
                                 "from": .string(stage), "to": .string(to)]
        if let reason = step.reason {
            entry["reason"] = .string(reason)
            // Why a record failed stays on it, for the board to show.
            if workflow.reasonRequired.contains(to) { data["reason"] = .string(reason) }
        }
        var history = data["history"]?.arrayValue ?? []
        let entered = history.last?.objectValue?["time"]?.numberValue?.int64Value ?? current.updated
        history.append(.object(entry))
        data["history"] = .array(history)
        plan.primaries.append(plan.writes.count)
        plan.add(Write(name: name, action: .set(data), baseVersion: write.baseVersion), origin: index)
        plan.replyExtras[index] = ["from": .string(stage), "to": .string(to)]

        if workflow.kind == .order, to == workflow.stockStage {
            let (item, qty, kind) = try Self.orderFields(data)
            guard let path = Self.stockPath else {
                throw ProtocolError(.storageFailed, "the hub cannot address \"stock\" on \(item); nothing was changed")
            }
            plan.add(Write(name: item, action: .boundedIncrement(path, by: kind == "receive" ? qty : -qty, atLeast: 0)),
                     origin: index)
        }
        delta.leave(stage)
        delta.enter(to)
        delta.spent(now - entered, in: stage)
        if workflow.isOpen(stage) {
            delta.stopWaiting(in: stage, since: WorkflowStats.entered(current.data, created: current.created))
        }
        if workflow.isOpen(to) { delta.wait(in: to, since: now) } else { delta.finish(to, at: now) }
        if workflow.isOpen(stage), !workflow.isOpen(to) {
            delta.closed.insert(ByteKey(name))
            // The list holds open work only: every order ever made would
            // make it (and each write of it) grow without end.
            try unlist(name, workflow: workflow, index: index, state: &state, plan: &plan)
        }
    }

    /// Takes `name` off the workflow's list, if it is there.
    private func unlist(_ name: String, workflow: Workflow, index: Int, state: inout some EngineState,
                        plan: inout WorkflowPlan) throws(ProtocolError) {
        if let list = workflow.list, try !state.listKeys(list, holding: name).isEmpty {
            plan.add(Write(name: list, action: .removeEntry(name, at: nil)), origin: index)
        }
    }

    // MARK: Domain fields

    /// Checks (and completes) a workflow record's own fields.
    private func validate(_ data: inout JSONObject, workflow: Workflow) throws(ProtocolError) {
        switch workflow.kind {
        case .plain:
            break
        case .order:
            if data["kind"] == nil { data["kind"] = "issue" }
            _ = try Self.orderFields(data)
        case .intake:
            if let photos = data["photos"] {
                guard case .array(let list) = photos, list.allSatisfy({ $0.stringValue != nil }) else {
                    throw .badField("photos", "\"photos\" must be an array of blob hashes (strings)")
                }
                if let limit = workflow.maxPhotos, list.count > limit {
                    throw .badField("photos", "an intake job holds at most \(limit) photos, not \(list.count)")
                }
            }
        }
    }

    // MARK: Orders and their items

    /// Where an order's `item` names its record.
    static let itemPrefix = "items/"

    /// A new order's item must exist (as the writes before it in the group
    /// leave it); with `checkStock`, an issue order may not ask for more
    /// than the item's `stock`.
    private func checkNewOrder(_ data: JSONObject, name: String, checkStock: Bool, state: inout some EngineState,
                               plan: WorkflowPlan) throws(ProtocolError) {
        let (item, qty, kind) = try Self.orderFields(data)
        guard let itemData = try plannedData(of: item, state: &state, plan: plan) else {
            throw ProtocolError(.notFound, "\"\(name)\" is an order for \"\(item)\", which does not exist; create the item first, or name an existing one",
                                details: ["item": .string(item)])
        }
        guard checkStock, kind == "issue" else { return }
        let stock = itemData["stock"]?.numberValue ?? JSONNumber(0)
        if Double(qty) > stock.doubleValue {
            throw ProtocolError(.insufficientStock, "\"\(item)\" has stock \(stock); this order needs \(qty). Order at most what is in stock, or receive stock first",
                                details: ["item": .string(item), "stock": .number(stock), "needed": .number(JSONNumber(qty))])
        }
    }

    /// A plain write (or an advance's data) that changes an order's `item`
    /// must name one that exists; an unchanged item is not looked up (it
    /// may have been deleted since the order was made).
    private func checkItemKept(_ after: JSONObject, before: JSONObject?, name: String, workflow: Workflow,
                               state: inout some EngineState, plan: WorkflowPlan) throws(ProtocolError) {
        guard workflow.kind == .order, case .string(let item)? = after["item"], after["item"] != before?["item"] else { return }
        guard try plannedData(of: item, state: &state, plan: plan) != nil else {
            throw ProtocolError(.notFound, "\"\(name)\" would name item \"\(item)\", which does not exist; create the item first, or name an existing one",
                                details: ["item": .string(item)])
        }
    }

    /// Record `name`'s data as the writes planned so far leave it (nil: it
    /// does not exist then). Only names under `items/` are followed through
    /// the plan.
    private func plannedData(of name: String, state: inout some EngineState,
                             plan: WorkflowPlan) throws(ProtocolError) -> JSONObject? {
        var data = try state.record(name)?.data
        for index in plan.itemWrites {
            let write = plan.writes[index]
            guard write.name.sameBytes(as: name) else { continue }
            switch write.action {
            case .set(let whole): data = whole
            case .merge(let patch): data = data?.mergePatched(with: patch)
            case .delete: data = nil
            case .setPath, .deletePath, .increment: data = Self.simulate(write.action, on: data ?? [:]) ?? data
            case .boundedIncrement(let path, let by, _):
                data = data.flatMap { (try? JSONValue.object($0).incrementing(at: path, by: JSONNumber(by)))?.objectValue } ?? data
            case .advance, .addEntry, .removeEntry, .setEntries, .deleteList: break
            }
        }
        return data
    }

    /// The data after a path write, or nil when the engine will refuse it anyway.
    static func simulate(_ action: Write.Action, on data: JSONObject) -> JSONObject? {
        let root = JSONValue.object(data)
        switch action {
        case .setPath(let path, let value): return (try? root.setting(value, at: path))?.objectValue
        case .deletePath(let path): return (try? root.removing(at: path))?.objectValue
        case .increment(let path, let by): return (try? root.incrementing(at: path, by: by))?.objectValue
        default: return data
        }
    }

    /// Parsed once; a constant path that failed to parse refuses the
    /// delivery instead of stopping the hub.
    static let stockPath = try? RecordPath(parsing: "stock")

    static func orderFields(_ data: JSONObject) throws(ProtocolError) -> (item: String, qty: Int64, kind: String) {
        guard case .string(let item)? = data["item"], item.hasPrefix("items/"), item.utf8.count > 6 else {
            throw .badField("item", "an order's \"item\" must name an item record, e.g. \"items/drill-01\"")
        }
        try Names.validate(item, field: "item")
        guard case .number(let number)? = data["qty"], number.isInteger, let qty = number.int64Value, qty >= 1,
              qty <= 1_000_000_000 else {
            throw .badField("qty", "an order's \"qty\" must be a whole number from 1 to 1000000000")
        }
        guard case .string(let kind)? = data["kind"], kind == "issue" || kind == "receive" else {
            throw .badField("kind", "an order's \"kind\" must be \"issue\" or \"receive\"")
        }
        return (item, qty, kind)
    }

    static func useAdvance(_ field: String, workflow: Workflow) -> ProtocolError {
        let message = field == workflow.stageField
            ? "stage changes go through advance (e.g. {\"op\":\"advance\",\"name\":…,\"to\":…}), so the hub can check them"
            : "\"\(field)\" is written by the hub; leave it out or unchanged"
        return ProtocolError(.useAdvance, message, details: ["field": .string(field)])
    }

    static func list(_ items: [String]) -> String {
        items.isEmpty ? "nothing" : items.map { "\"\($0)\"" }.joined(separator: ", ")
    }
}
