import TallyClient
import TallyProtocol

/// One workflow's stage machine, as `GET /v1/workflows` describes it: what
/// the merge rule needs to keep a stage from moving backwards or illegally.
public struct WorkflowRule: Sendable, Equatable {
    public var prefix: String
    public var stageField: String
    /// In the workflow's order; the first is where every record starts.
    public var stages: [String]
    public var transitions: [String: [String]]
    public var terminal: [String]
    /// The list the hub keeps the workflow's records in, if any.
    public var list: String?

    public init(prefix: String, stageField: String = "stage", stages: [String], transitions: [String: [String]],
                terminal: [String], list: String? = nil) {
        self.prefix = prefix
        self.stageField = stageField
        self.stages = stages
        self.transitions = transitions
        self.terminal = terminal
        self.list = list
    }

    /// Members a plain write may not change: the hub keeps them.
    public var protectedFields: Set<String> { [stageField, "history", "owner"] }

    public func index(of stage: String) -> Int? { stages.firstIndex(of: stage) }

    public func allows(from: String, to: String) -> Bool { transitions[from]?.contains(to) ?? false }

    /// The shortest chain of legal transitions from `from` to `to` (the
    /// stages after `from`), or nil when `to` cannot be reached.
    public func path(from: String, to: String) -> [String]? {
        if from == to { return [] }
        var previous: [String: String] = [from: from]
        var frontier = [from]
        while !frontier.isEmpty {
            var next: [String] = []
            for stage in frontier {
                for target in transitions[stage] ?? [] where previous[target] == nil {
                    previous[target] = stage
                    if target == to {
                        var chain = [to]
                        var cursor = stage
                        while cursor != from {
                            chain.insert(cursor, at: 0)
                            cursor = previous[cursor] ?? from
                        }
                        return chain
                    }
                    next.append(target)
                }
            }
            frontier = next
        }
        return nil
    }

    /// The stage both sides end at when each moved the record on its own:
    /// the one further along the workflow's order, if the hub's stage can
    /// legally reach it; otherwise the hub's (a stage never moves backwards).
    public func furthest(local: String, hub: String) -> String {
        guard local != hub, let l = index(of: local), let h = index(of: hub), l > h,
              path(from: hub, to: local) != nil else { return hub }
        return local
    }
}

/// The workflows a mirror knows: the hub's answer to `GET /v1/workflows`,
/// or the two that ship with the hub until that answer is in.
public struct WorkflowCatalog: Sendable, Equatable {
    public var rules: [WorkflowRule]

    public init(rules: [WorkflowRule]) { self.rules = rules }

    /// The workflow `name` is under (the longest matching prefix).
    public func rule(for name: String) -> WorkflowRule? {
        rules.filter { name.hasBytePrefix($0.prefix) && name.utf8.count > $0.prefix.utf8.count }
            .max { $0.prefix.utf8.count < $1.prefix.utf8.count }
    }

    /// The stock-order and intake-job workflows every hub ships (PROTOCOL.md, "Workflows").
    public static let shipped = WorkflowCatalog(rules: [
        WorkflowRule(prefix: "orders/", stages: ["received", "in-progress", "ready", "delivered", "cancelled"],
                     transitions: ["received": ["in-progress", "cancelled"], "in-progress": ["ready", "cancelled"],
                                   "ready": ["delivered", "cancelled"]],
                     terminal: ["delivered", "cancelled"], list: "orders"),
        WorkflowRule(prefix: "intake/", stages: ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done", "failed"],
                     transitions: ["queued": ["created", "failed"], "created": ["media-uploaded", "failed"],
                                   "media-uploaded": ["analyzed", "cover-set", "done", "failed"],
                                   "analyzed": ["cover-set", "done", "failed"], "cover-set": ["done", "failed"]],
                     terminal: ["done", "failed"], list: "intake"),
    ])

    /// Reads `{"workflows":[{"prefix","stageField","stages","transitions","terminal","list"},…]}`.
    public init?(json: JSONValue) {
        guard case .array(let flows)? = json["workflows"] else { return nil }
        var rules: [WorkflowRule] = []
        for case .object(let flow) in flows {
            guard let prefix = flow["prefix"]?.stringValue,
                  let stages = flow["stages"]?.arrayValue?.compactMap(\.stringValue), !stages.isEmpty else { continue }
            var transitions: [String: [String]] = [:]
            for (from, targets) in flow["transitions"]?.objectValue ?? [:] {
                transitions[from] = targets.arrayValue?.compactMap(\.stringValue) ?? []
            }
            rules.append(WorkflowRule(prefix: prefix, stageField: flow["stageField"]?.stringValue ?? "stage",
                                      stages: stages, transitions: transitions,
                                      terminal: flow["terminal"]?.arrayValue?.compactMap(\.stringValue) ?? [],
                                      list: flow["list"]?.stringValue))
        }
        self.rules = rules
    }

    public var json: JSONValue {
        .object(["workflows": .array(rules.map { rule in
            var object: JSONObject = [
                "prefix": .string(rule.prefix), "stageField": .string(rule.stageField),
                "stages": .array(rule.stages.map(JSONValue.string)),
                "transitions": .object(JSONObject(rule.transitions.map { ($0.key, JSONValue.array($0.value.map(JSONValue.string))) })),
                "terminal": .array(rule.terminal.map(JSONValue.string)),
            ]
            if let list = rule.list { object["list"] = .string(list) }
            return .object(object)
        })])
    }
}

extension WorkflowCatalog {
    /// The hub's workflows as `GET /v1/workflows` answers them; nil when
    /// it cannot say (unreachable, a refusal, an older hub).
    public static func fetchJSON(_ access: HubAccess) -> JSONValue? {
        guard let response = try? RESTClient(access: access).get("/v1/workflows"), response.status == 200 else { return nil }
        return try? JSONValue.parse(response.body)
    }
}
