@preconcurrency import Glibc
import Testing
import TallyEngine
import TallyProtocol
@testable import TallyServer

/// The config file's `users`, `roles` and `workflows` (docs/config.md):
/// what each accepts, every refusal named by its JSON path, and how the
/// file's roles and workflows merge over the shipped ones.
@Suite("HubConfigFile access")
struct HubConfigAccessTests {
    static func parse(_ text: String) throws -> HubConfigFile { try HubConfigFileTests.parse(text) }

    /// The refusal's "PATH: message", or nil when the text is accepted.
    static func refusal(_ text: String) -> String? { HubConfigFileTests.refusal(text) }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }

    static let tokenHash = hex(Authenticator.sha256(Array("example-token-ana".utf8)))

    /// A user entry; `token` is its token member(s), by default a tokenSha256.
    static func user(_ name: String = "ana", role: String = "staff", token: String? = nil) -> String {
        let member = token ?? "\"tokenSha256\":\"\(tokenHash)\""
        return "{\"name\":\"\(name)\",\"role\":\"\(role)\",\(member)}"
    }

    // MARK: Users

    @Test func aUserWithATokenHash() throws {
        let file = try Self.parse(#"{"users":[\#(Self.user())]}"#)
        let users = try #require(file.users)
        #expect(users == [HubUser(name: "ana", role: "staff", tokenHash: Authenticator.sha256(Array("example-token-ana".utf8)))])
        // Upper-case hex digits are the same hash.
        let upper = try Self.parse(#"{"users":[\#(Self.user(token: #""tokenSha256":"\#(Self.tokenHash.uppercased())""#))]}"#)
        #expect(upper.users == users)
    }

    @Test func aUserWithATokenFromTheEnvironment() throws {
        // PATH is set wherever tests run; no setenv (other tests run in parallel).
        let path = try #require(getenv("PATH").map { String(cString: $0) })
        #expect(!path.isEmpty)
        let file = try Self.parse(#"{"users":[{"name":"wall","role":"dashboard","tokenEnv":"PATH"}]}"#)
        #expect(file.users == [HubUser(name: "wall", role: "dashboard", tokenHash: Authenticator.sha256(Array(path.utf8)))])
    }

    @Test func aMissingEnvironmentVariableIsNamed() {
        let variable = "TALLY_TEST_SURELY_UNSET_\(UInt32.random(in: 0...UInt32.max))"
        let message = Self.refusal(#"{"users":[\#(Self.user(token: #""tokenEnv":"\#(variable)""#))]}"#)
        #expect(message?.hasPrefix("$.users[0].tokenEnv: ") == true, "\(String(describing: message))")
        #expect(message?.contains(variable) == true, "\(String(describing: message))")
    }

    @Test func noUsersMeansNil() throws {
        #expect(try Self.parse("{}").users == nil)
        #expect(try Self.parse(#"{"users":[]}"#).users == [])
    }

    @Test func usersAreInOrderAndRolesMayBeConfiguredOnes() throws {
        let file = try Self.parse("""
            {"users":[\(Self.user("root", role: "admin")),\(Self.user("pat", role: "packer"))],
             "roles":{"packer":[{"names":"items/**","allow":["read"]}]}}
            """)
        #expect(file.users?.map(\.name) == ["root", "pat"])
        #expect(file.users?.map(\.role) == ["admin", "packer"])
    }

    @Test(arguments: [
        // Both token fields, or neither.
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":"\#(HubConfigAccessTests.tokenHash)","tokenEnv":"PATH"}]}"#, "$.users[0]", "exactly one"),
        (#"{"users":[{"name":"a","role":"staff"}]}"#, "$.users[0]", "exactly one"),
        // A hash that is not 64 hex digits.
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":"\#(HubConfigAccessTests.tokenHash.dropLast())"}]}"#, "$.users[0].tokenSha256", "64 hex digits"),
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":"\#(HubConfigAccessTests.tokenHash)00"}]}"#, "$.users[0].tokenSha256", "64 hex digits"),
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":"\#("zz" + HubConfigAccessTests.tokenHash.dropFirst(2))"}]}"#, "$.users[0].tokenSha256", "64 hex digits"),
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":12}]}"#, "$.users[0].tokenSha256", "64 hex digits"),
        (#"{"users":[{"name":"a","role":"staff","tokenEnv":""}]}"#, "$.users[0].tokenEnv", "non-empty string"),
        // The same name twice: the second is named.
        (#"{"users":[\#(HubConfigAccessTests.user("ana")),\#(HubConfigAccessTests.user("ben")),\#(HubConfigAccessTests.user("ana"))]}"#, "$.users[2].name", "listed twice"),
        // A role that is neither shipped nor configured.
        (#"{"users":[\#(HubConfigAccessTests.user(role: "boss"))]}"#, "$.users[0].role", #"unknown role "boss""#),
        (#"{"users":[\#(HubConfigAccessTests.user()),\#(HubConfigAccessTests.user("ben", role: "Staff"))]}"#, "$.users[1].role", #"unknown role "Staff""#),
        // Shapes.
        (#"{"users":{"ana":"staff"}}"#, "$.users", "must be an array"),
        (#"{"users":["ana"]}"#, "$.users[0]", "must be an object"),
        (#"{"users":[{"role":"staff","tokenEnv":"PATH"}]}"#, "$.users[0].name", "non-empty string"),
        (#"{"users":[{"name":"","role":"staff","tokenEnv":"PATH"}]}"#, "$.users[0].name", "non-empty string"),
        (#"{"users":[{"name":"a","tokenEnv":"PATH"}]}"#, "$.users[0].role", "non-empty string"),
        (#"{"users":[{"name":"a","role":"staff","tokenEnv":"PATH","password":"x"}]}"#, "$.users[0].password", "unknown setting"),
    ])
    func userMistakes(text: String, path: String, words: String) {
        Self.expectRefusal(text, path: path, words: words)
    }

    @Test func anUnknownRoleListsTheKnownOnes() {
        let message = Self.refusal(#"{"users":[\#(Self.user(role: "x"))],"roles":{"packer":[]}}"#)
        #expect(message == #"$.users[0].role: unknown role "x"; known: admin, client, dashboard, packer, staff"#)
    }

    // MARK: Roles

    @Test func rolesAreRead() throws {
        let file = try Self.parse("""
            {"roles":{"auditor":[{"names":"**","allow":["read","subscribe"]},
                                 {"names":"orders/*","allow":["read"],"own":true},
                                 {"names":"stats/**","allow":[],"own":false}],
                      "nobody":[]}}
            """)
        #expect(file.roles["auditor"] == [AccessRule("**", [.read, .subscribe]),
                                          AccessRule("orders/*", [.read], own: true),
                                          AccessRule("stats/**", [])])
        #expect(file.roles["nobody"] == [])
    }

    @Test(arguments: [
        (#"{"roles":{"auditor":[{"names":"**","allow":["read","view"]}]}}"#, "$.roles.auditor[0].allow[1]", "must be one of read, write"),
        (#"{"roles":{"auditor":[{"names":"**","allow":["Read"]}]}}"#, "$.roles.auditor[0].allow[0]", "must be one of"),
        (#"{"roles":{"auditor":[{"names":"**","allow":[1]}]}}"#, "$.roles.auditor[0].allow[0]", "must be one of"),
        (#"{"roles":{"auditor":[{"names":"**","allow":"read"}]}}"#, "$.roles.auditor[0].allow", "must be an array of operations"),
        (#"{"roles":{"auditor":[{"names":"**"}]}}"#, "$.roles.auditor[0].allow", "must be an array of operations"),
        (#"{"roles":{"auditor":[{"names":"orders/*","allow":["read"],"own":"yes"}]}}"#, "$.roles.auditor[0].own", "true or false"),
        (#"{"roles":{"auditor":[{"names":"orders/*","allow":["read"],"own":1}]}}"#, "$.roles.auditor[0].own", "true or false"),
        (#"{"roles":{"auditor":{"names":"**","allow":["read"]}}}"#, "$.roles.auditor", "must be an array of rules"),
        (#"{"roles":{"auditor":"read"}}"#, "$.roles.auditor", "must be an array of rules"),
        (#"{"roles":[{"names":"**","allow":["read"]}]}"#, "$.roles", "must be an object"),
        (#"{"roles":{"auditor":[{"allow":["read"]}]}}"#, "$.roles.auditor[0].names", "non-empty string"),
        (#"{"roles":{"auditor":[{"names":"","allow":["read"]}]}}"#, "$.roles.auditor[0].names", "non-empty string"),
        (#"{"roles":{"auditor":["**"]}}"#, "$.roles.auditor[0]", "must be an object"),
        (#"{"roles":{"auditor":[{"names":"**","allow":["read"],"deny":["write"]}]}}"#, "$.roles.auditor[0].deny", "unknown setting"),
        (#"{"roles":{"a":[],"auditor":[{"names":"**","allow":["read"]},{"names":"x","allow":["nope"]}]}}"#, "$.roles.auditor[1].allow[0]", "must be one of"),
    ])
    func roleMistakes(text: String, path: String, words: String) {
        Self.expectRefusal(text, path: path, words: words)
    }

    // MARK: Workflows

    @Test func overridingAShippedWorkflowKeepsWhatItDoesNotName() throws {
        let file = try Self.parse("""
            {"workflows":{"orders/":{"roles":{"*":["admin","staff"],"ready->delivered":["admin"]}},
                          "intake/":{"maxPhotos":20}}}
            """)
        let orders = try #require(file.workflows["orders/"] ?? nil)
        var expected = Workflow.orders
        expected.roles = ["*": ["admin", "staff"], "ready->delivered": ["admin"]]
        #expect(orders == expected)
        #expect(orders.stages == Workflow.orders.stages)
        #expect(orders.transitions == Workflow.orders.transitions)
        #expect(orders.terminal == Workflow.orders.terminal)
        #expect(orders.stats == "stats/orders" && orders.list == "orders")
        #expect(orders.kind == .order && orders.stockStage == "delivered" && orders.stageField == "stage")
        #expect(orders.deleteRoles == ["admin"])
        #expect(orders.roles(from: "ready", to: "delivered") == ["admin"])
        #expect(orders.roles(from: "received", to: "in-progress") == ["admin", "staff"])

        let intake = try #require(file.workflows["intake/"] ?? nil)
        var expectedIntake = Workflow.intake
        expectedIntake.maxPhotos = 20
        #expect(intake == expectedIntake)
        #expect(intake.reasonRequired == ["failed"])
    }

    @Test func givenMembersReplaceTheShippedOnesWhole() throws {
        let file = try Self.parse("""
            {"workflows":{"orders/":{"stages":["received","delivered","cancelled"],
                                     "transitions":{"received":["delivered","cancelled"]},
                                     "roles":{"received->delivered":["admin"]}, "stageField":"status",
                                     "deleteRoles":["admin","staff"], "stats":"stats/shop", "list":"shop"}}}
            """)
        let orders = try #require(file.workflows["orders/"] ?? nil)
        #expect(orders.stages == ["received", "delivered", "cancelled"])
        #expect(orders.transitions == ["received": ["delivered", "cancelled"]])
        #expect(orders.terminal == ["delivered", "cancelled"])
        // No "*": a transition without its own entry may be made by nobody.
        #expect(orders.roles == ["received->delivered": ["admin"]])
        #expect(orders.roles(from: "received", to: "cancelled").isEmpty)
        #expect(orders.stageField == "status" && orders.deleteRoles == ["admin", "staff"])
        #expect(orders.stats == "stats/shop" && orders.list == "shop" && orders.kind == .order)
    }

    @Test func nullRemovesAShippedWorkflow() throws {
        let file = try Self.parse(#"{"workflows":{"intake/":null}}"#)
        #expect(file.workflows.count == 1)
        #expect(file.workflows["intake/"] == .some(nil))
        #expect(file.workflowSet.workflow(prefix: "intake/") == nil)
        #expect(file.workflowSet.workflow(for: "intake/job-1") == nil)
        #expect(file.workflowSet.workflow(prefix: "orders/") == Workflow.orders)
    }

    @Test func aNewWorkflowGetsTheDefaults() throws {
        let file = try Self.parse("""
            {"workflows":{"repairs/":{"stages":["reported","fixed"],"transitions":{"reported":["fixed"]}},
                          "sales/":{"stages":["open","delivered"],"transitions":{"open":["delivered"]},"kind":"order",
                                    "terminal":["delivered"]}}}
            """)
        let repairs = try #require(file.workflows["repairs/"] ?? nil)
        #expect(repairs.prefix == "repairs/" && repairs.stageField == "stage" && repairs.kind == .plain)
        #expect(repairs.terminal.isEmpty && repairs.stats == nil && repairs.list == nil)
        #expect(repairs.roles == ["*": ["admin", "staff"]] && repairs.deleteRoles == ["admin"])
        #expect(repairs.reasonRequired.isEmpty && repairs.stockStage == nil && repairs.maxPhotos == nil)
        // An order workflow with a "delivered" stage moves stock there.
        let sales = try #require(file.workflows["sales/"] ?? nil)
        #expect(sales.kind == .order && sales.stockStage == "delivered")
    }

    @Test(arguments: [
        // Unknown stages, wherever a stage is named.
        (#"{"workflows":{"orders/":{"transitions":{"received":["in-progress"],"shipped":["delivered"]}}}}"#,
         "$.workflows.orders/.transitions.shipped", #""shipped" is not one of the stages"#),
        (#"{"workflows":{"orders/":{"transitions":{"received":["shipped"]}}}}"#,
         "$.workflows.orders/.transitions.received", #""shipped" is not one of the stages"#),
        (#"{"workflows":{"orders/":{"terminal":["delivered","lost"]}}}"#,
         "$.workflows.orders/.terminal", #""lost" is not one of the stages"#),
        (#"{"workflows":{"orders/":{"stockStage":"shipped"}}}"#,
         "$.workflows.orders/.stockStage", #""shipped" is not one of the stages"#),
        // The shipped transitions name stages the new list lacks.
        (#"{"workflows":{"orders/":{"stages":["received","done"]}}}"#,
         "$.workflows.orders/.transitions.", "is not one of the stages"),
        // A terminal stage with transitions.
        (#"{"workflows":{"orders/":{"transitions":{"received":["delivered"],"delivered":["received"]}}}}"#,
         "$.workflows.orders/.transitions.delivered", #""delivered" is terminal"#),
        // A roles key that is not "*" nor an allowed transition.
        (#"{"workflows":{"orders/":{"roles":{"*":["admin"],"received->delivered":["admin"]}}}}"#,
         "$.workflows.orders/.roles.received->delivered", "naming an allowed transition"),
        (#"{"workflows":{"orders/":{"roles":{"anyone":["admin"]}}}}"#,
         "$.workflows.orders/.roles.anyone", "naming an allowed transition"),
        (#"{"workflows":{"orders/":{"roles":{"*":["admin"],"shipped->delivered":["admin"]}}}}"#,
         "$.workflows.orders/.roles.shipped->delivered", "naming an allowed transition"),
        // An unknown role in the workflow's roles.
        (#"{"workflows":{"orders/":{"roles":{"*":["admin","staff"],"ready->delivered":["boss"]}}}}"#,
         "$.workflows.orders/.roles.ready->delivered", #"unknown role "boss""#),
        // Members and types.
        (#"{"workflows":{"orders/":{"colour":"red"}}}"#, "$.workflows.orders/.colour", "unknown setting"),
        (#"{"workflows":{"orders/":{"kind":"shop"}}}"#, "$.workflows.orders/.kind", #"must be "plain", "order" or "intake""#),
        (#"{"workflows":{"orders/":{"kind":1}}}"#, "$.workflows.orders/.kind", #"must be "plain""#),
        (#"{"workflows":{"orders/":{"stages":"received"}}}"#, "$.workflows.orders/.stages", "must be an array of strings"),
        (#"{"workflows":{"orders/":{"stages":["received",""]}}}"#, "$.workflows.orders/.stages[1]", "non-empty string"),
        (#"{"workflows":{"orders/":{"stages":[]}}}"#, "$.workflows.orders/.stages", "at least one stage"),
        (#"{"workflows":{"orders/":{"stages":["received","ready","received"]}}}"#, "$.workflows.orders/.stages", "twice"),
        (#"{"workflows":{"orders/":{"transitions":["received"]}}}"#, "$.workflows.orders/.transitions", "must map each stage"),
        (#"{"workflows":{"orders/":{"transitions":{"received":"ready"}}}}"#, "$.workflows.orders/.transitions.received", "must be an array"),
        (#"{"workflows":{"orders/":{"roles":["admin"]}}}"#, "$.workflows.orders/.roles", "must map"),
        (#"{"workflows":{"orders/":{"roles":{"*":"admin"}}}}"#, "$.workflows.orders/.roles.*", "must be an array"),
        (#"{"workflows":{"orders/":{"deleteRoles":"admin"}}}"#, "$.workflows.orders/.deleteRoles", "must be an array"),
        (#"{"workflows":{"orders/":{"stats":"/stats/orders"}}}"#, "$.workflows.orders/.stats", "must not start with '/'"),
        (#"{"workflows":{"orders/":{"list":"orders/"}}}"#, "$.workflows.orders/.list", "must not end with '/'"),
        (#"{"workflows":{"orders/":{"stats":""}}}"#, "$.workflows.orders/.stats", "non-empty string"),
        (#"{"workflows":{"intake/":{"maxPhotos":1001}}}"#, "$.workflows.intake/.maxPhotos", "from 0 to 1000"),
        (#"{"workflows":{"intake/":{"maxPhotos":-1}}}"#, "$.workflows.intake/.maxPhotos", "from 0 to 1000"),
        (#"{"workflows":{"intake/":{"reasonRequired":[1]}}}"#, "$.workflows.intake/.reasonRequired[0]", "non-empty string"),
        (#"{"workflows":{"orders/":{"stageField":""}}}"#, "$.workflows.orders/.stageField", "non-empty string"),
        (#"{"workflows":{"orders/":"off"}}"#, "$.workflows.orders/", "or null to remove it"),
        (#"{"workflows":["orders/"]}"#, "$.workflows", "must be an object"),
        // A new prefix needs stages, and a prefix ends with '/'.
        (#"{"workflows":{"repairs/":{"transitions":{}}}}"#, "$.workflows.repairs/.stages", "is missing"),
        (#"{"workflows":{"repairs":{"stages":["open"]}}}"#, "$.workflows.repairs", "ending in '/'"),
        (#"{"workflows":{"orders":null}}"#, "$.workflows.orders", "ending in '/'"),
        (#"{"workflows":{"orders/":{"deleteRoles":["boss"]}}}"#, "$.workflows.orders/.deleteRoles", "unknown role \"boss\""),
        (#"{"workflows":{"orders/":{"reasonRequired":["cancled"]}}}"#, "$.workflows.orders/.reasonRequired", "\"cancled\" is not one of the stages"),
    ])
    func workflowMistakes(text: String, path: String, words: String) {
        Self.expectRefusal(text, path: path, words: words)
    }

    @Test func aConfiguredRoleMayBeNamedInAWorkflow() throws {
        let file = try Self.parse("""
            {"roles":{"packer":[{"names":"orders/**","allow":["read"]}]},
             "workflows":{"orders/":{"roles":{"*":["admin","staff"],"in-progress->ready":["packer"]}}}}
            """)
        let orders = try #require(file.workflows["orders/"] ?? nil)
        #expect(orders.roles(from: "in-progress", to: "ready") == ["packer"])
        #expect(orders.mayAdvance("packer"))
    }

    // MARK: Every refusal names its path

    @Test(arguments: [
        ("[]", "$"),
        (#"{"users":[{"name":"a","role":"staff","tokenSha256":"x"}]}"#, "$.users[0].tokenSha256"),
        (#"{"users":[{"name":"a","role":"nobody","tokenEnv":"PATH"}]}"#, "$.users[0].role"),
        (#"{"roles":{"r":[{"names":"**","allow":["read"],"own":null}]}}"#, "$.roles.r[0].own"),
        (#"{"workflows":{"orders/":{"terminal":["gone"]}}}"#, "$.workflows.orders/.terminal"),
        (#"{"workflows":{"intake/":{"roles":{"queued->done":["admin"]}}}}"#, "$.workflows.intake/.roles.queued->done"),
        (#"{"workflows":{"intake/":{"maxPhotos":"12"}}}"#, "$.workflows.intake/.maxPhotos"),
        (#"{"users":[],"roles":{},"workflows":{},"extra":1}"#, "$.extra"),
        // Integers are integer literals: a fraction or an exponent is refused.
        (#"{"port":8080.0}"#, "$.port"),
        (#"{"workflows":{"intake/":{"maxPhotos":1e1}}}"#, "$.workflows.intake/.maxPhotos"),
    ])
    func everyRefusalStartsWithItsPath(text: String, path: String) throws {
        let message = try #require(Self.refusal(text), "accepted: \(text)")
        #expect(message.hasPrefix("\(path): "), "\(message)")
        #expect(message.count > path.count + 2, "no message after the path: \(message)")
    }

    // MARK: Merging over the shipped defaults

    @Test func thePolicyIsTheShippedRolesWithTheFilesOverThem() throws {
        let file = try Self.parse("""
            {"roles":{"packer":[{"names":"items/**","allow":["read","write"]}],
                      "client":[{"names":"items/**","allow":["read"]}]}}
            """)
        let roles = file.policy.roles
        #expect(Set(roles.keys) == ["admin", "staff", "dashboard", "client", "packer"])
        #expect(roles["admin"] == AccessPolicy.defaultRoles["admin"])
        #expect(roles["staff"] == AccessPolicy.defaultRoles["staff"])
        #expect(roles["dashboard"] == AccessPolicy.defaultRoles["dashboard"])
        #expect(roles["client"] == [AccessRule("items/**", [.read])])
        #expect(roles["packer"] == [AccessRule("items/**", [.read, .write])])

        let policy = file.policy
        let packer = Actor(user: "pat", role: "packer")
        #expect(policy.decide(packer, .write, name: "items/drill-01") == .allowed)
        #expect(policy.decide(packer, .delete, name: "items/drill-01") == .denied)
        // The redefined client lost its shipped orders rules.
        let client = Actor(user: "cleo", role: "client")
        #expect(policy.decide(client, .create, name: "orders/1") == .denied)
        #expect(AccessPolicy().decide(client, .create, name: "orders/1") == .allowed)

        // No roles in the file: exactly the shipped ones.
        #expect(try Self.parse("{}").policy.roles == AccessPolicy.defaultRoles)
    }

    @Test func theWorkflowSetIsTheShippedWorkflowsWithTheFilesOverThem() throws {
        let file = try Self.parse("""
            {"workflows":{"orders/":{"roles":{"*":["admin","staff"],"ready->delivered":["admin"]}},
                          "intake/":null,
                          "repairs/":{"stages":["reported","fixed"],"transitions":{"reported":["fixed"]},"terminal":["fixed"]},
                          "orders/big/":{"stages":["new","done"],"transitions":{"new":["done"]},"terminal":["done"]}}}
            """)
        let flows = file.workflowSet
        #expect(Set(flows.workflows.map(\.prefix)) == ["orders/", "repairs/", "orders/big/"])
        #expect(flows.workflow(prefix: "orders/")?.roles(from: "ready", to: "delivered") == ["admin"])
        #expect(flows.workflow(prefix: "orders/")?.stats == "stats/orders")
        #expect(flows.workflow(for: "repairs/r-1")?.prefix == "repairs/")
        // The longest prefix wins.
        #expect(flows.workflow(for: "orders/big/7")?.prefix == "orders/big/")
        #expect(flows.workflow(for: "orders/7")?.prefix == "orders/")
        #expect(flows.workflow(for: "intake/1") == nil)

        // No workflows in the file: exactly the shipped ones.
        let shipped = try Self.parse("{}").workflowSet
        #expect(shipped.workflows.count == 2)
        #expect(shipped.workflow(prefix: "orders/") == Workflow.orders)
        #expect(shipped.workflow(prefix: "intake/") == Workflow.intake)
    }

    // MARK: The documented example

    @Test func theExampleInDocsParses() throws {
        let repo = String(#filePath.split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/"))
        let file = try HubConfigFile.load(path: "\(repo)/docs/tally.example.json")
        #expect(file.users?.map(\.role).sorted() == ["admin", "client", "dashboard", "packer", "staff", "staff"])
        #expect(file.users?.first { $0.name == "root" }?.tokenHash == Authenticator.sha256(Array("example-token-root".utf8)))
        #expect(file.workflowSet.workflow(prefix: "orders/")?.roles(from: "ready", to: "delivered") == ["admin"])
        #expect(file.policy.roles["packer"] != nil)
    }

    // MARK: Support

    static func expectRefusal(_ text: String, path: String, words: String,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        guard let message = refusal(text) else {
            Issue.record("accepted: \(text)", sourceLocation: sourceLocation)
            return
        }
        // A path ending in "." only fixes what it starts with (a dictionary's
        // order decides which entry is named).
        let pathOK = path.hasSuffix(".") ? message.hasPrefix(path) : message.hasPrefix("\(path): ")
        #expect(pathOK, "expected the path \(path): \(message)", sourceLocation: sourceLocation)
        #expect(message.contains(words), "expected \"\(words)\" in: \(message)", sourceLocation: sourceLocation)
    }
}
