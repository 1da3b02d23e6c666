import TallyProtocol

/// A stage machine declared for every record under a prefix (PRODUCT.md,
/// "Domain: workflows"): the hub refuses illegal transitions, stamps each
/// stage change into the record's history and keeps a stats record.
public struct Workflow: Sendable, Equatable {
    /// Domain rules beyond the stage machine.
    public enum Kind: String, Sendable, Equatable {
        case plain
        /// `{"item","qty","kind"}`; reaching `stockStage` adjusts the item's stock.
        case order
        /// Photos are limited to `maxPhotos`.
        case intake
    }

    public var prefix: String
    public var stageField = "stage"
    /// In display order; the first is where every record starts.
    public var stages: [String]
    /// Allowed next stages, the first being the default `advance` target.
    public var transitions: [String: [String]]
    public var terminal: Set<String>
    /// Roles allowed per transition, keyed "from->to", with "*" as the default.
    public var roles: [String: Set<String>]
    /// Roles that may delete a record of this workflow.
    public var deleteRoles: Set<String> = ["admin"]
    /// The hub-kept aggregate record, e.g. "stats/orders".
    public var stats: String?
    /// A list of the open records: the hub appends every new record's name
    /// and removes it when the record reaches a terminal stage (or is deleted).
    public var list: String?
    public var kind: Kind = .plain
    /// Stages a record may only enter with a `reason`.
    public var reasonRequired: Set<String> = []
    /// For orders: the stage whose entry moves stock.
    public var stockStage: String?
    public var maxPhotos: Int?

    public init(prefix: String, stages: [String], transitions: [String: [String]], terminal: Set<String>,
                roles: [String: Set<String>]) {
        self.prefix = prefix
        self.stages = stages
        self.transitions = transitions
        self.terminal = terminal
        self.roles = roles
    }

    public var initial: String { stages[0] }

    /// Fields only the hub writes (stage changes go through `advance`).
    public var protectedFields: Set<String> { [stageField, "history", "owner"] }

    public func allowed(from stage: String) -> [String] { transitions[stage] ?? [] }

    public func roles(from: String, to: String) -> Set<String> { roles["\(from)->\(to)"] ?? roles["*"] ?? [] }

    /// Whether `role` may make any transition at all: checked before
    /// anything about a record is revealed to it.
    public func mayAdvance(_ role: String) -> Bool { roles.values.contains { $0.contains(role) } }

    public func isOpen(_ stage: String) -> Bool { !terminal.contains(stage) }

    /// received → in-progress → ready → delivered, or cancelled from any
    /// stage before delivered.
    public static let orders: Workflow = {
        var flow = Workflow(
            prefix: "orders/", stages: ["received", "in-progress", "ready", "delivered", "cancelled"],
            transitions: ["received": ["in-progress", "cancelled"], "in-progress": ["ready", "cancelled"],
                          "ready": ["delivered", "cancelled"]],
            terminal: ["delivered", "cancelled"], roles: ["*": ["admin", "staff"]])
        flow.stats = "stats/orders"
        flow.list = "orders"
        flow.kind = .order
        flow.stockStage = "delivered"
        return flow
    }()

    /// Seed 000's staged intake: create the record, the item, upload media,
    /// optionally analyze and set a cover, done — or failed with a reason.
    public static let intake: Workflow = {
        var flow = Workflow(
            prefix: "intake/",
            stages: ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done", "failed"],
            transitions: ["queued": ["created", "failed"], "created": ["media-uploaded", "failed"],
                          "media-uploaded": ["analyzed", "cover-set", "done", "failed"],
                          "analyzed": ["cover-set", "done", "failed"], "cover-set": ["done", "failed"]],
            terminal: ["done", "failed"], roles: ["*": ["admin", "staff"]])
        flow.stats = "stats/intake"
        flow.list = "intake"
        flow.kind = .intake
        flow.reasonRequired = ["failed"]
        flow.maxPhotos = 12
        return flow
    }()

    /// Checks that the declaration is a usable stage machine; the message
    /// names the member to fix.
    public func validate() -> (field: String, message: String)? {
        guard !prefix.isEmpty, prefix.hasSuffix("/") else { return ("prefix", "a workflow prefix must end with '/', e.g. \"orders/\"") }
        guard !stages.isEmpty else { return ("stages", "needs at least one stage") }
        guard Set(stages).count == stages.count else { return ("stages", "lists a stage twice") }
        let known = Set(stages)
        for (from, targets) in transitions.sorted(by: { $0.key < $1.key }) {
            guard known.contains(from) else { return ("transitions.\(from)", "\"\(from)\" is not one of the stages") }
            if let bad = targets.first(where: { !known.contains($0) }) {
                return ("transitions.\(from)", "\"\(bad)\" is not one of the stages")
            }
            if terminal.contains(from) { return ("transitions.\(from)", "\"\(from)\" is terminal, so it has no transitions") }
        }
        if let bad = terminal.sorted().first(where: { !known.contains($0) }) { return ("terminal", "\"\(bad)\" is not one of the stages") }
        if let bad = reasonRequired.sorted().first(where: { !known.contains($0) }) {
            return ("reasonRequired", "\"\(bad)\" is not one of the stages")
        }
        for key in roles.keys.sorted() where key != "*" {
            guard let arrow = key.firstRange(of: "->"),
                  allowed(from: String(key[..<arrow.lowerBound])).contains(String(key[arrow.upperBound...])) else {
                return ("roles.\(key)", "must be \"*\" or \"from->to\" naming an allowed transition")
            }
        }
        if let stockStage, !known.contains(stockStage) { return ("stockStage", "\"\(stockStage)\" is not one of the stages") }
        return nil
    }
}

/// The declared workflows, matched by the longest prefix.
public struct WorkflowSet: Sendable {
    public let workflows: [Workflow]
    private let statsNames: Set<ByteKey>

    public init(_ workflows: [Workflow]) {
        self.workflows = workflows.sorted { $0.prefix.utf8.count > $1.prefix.utf8.count }
        statsNames = Set(workflows.compactMap { $0.stats.map(ByteKey.init) })
    }

    public static let defaults = WorkflowSet([.orders, .intake])

    public func workflow(for name: String) -> Workflow? {
        workflows.first { name.hasBytePrefix($0.prefix) }
    }

    public func workflow(prefix: String) -> Workflow? { workflows.first { $0.prefix.sameBytes(as: prefix) } }

    /// Where the hub keeps aggregate records; no client writes under it.
    public static let statsPrefix = "stats/"

    /// Stats records (everything under `stats/`, and any configured stats
    /// record elsewhere) are written by the hub only.
    public func isHubOwned(_ name: String) -> Bool {
        name.hasBytePrefix(Self.statsPrefix) || (!statsNames.isEmpty && statsNames.contains(ByteKey(name)))
    }
}
