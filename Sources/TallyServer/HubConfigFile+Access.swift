@preconcurrency import Glibc
import TallyEngine
import TallyProtocol

/// The config file's `users`, `roles` and `workflows` (README, "Config file").
extension HubConfigFile {
    static func parseUsers(_ value: JSONValue, _ path: String) throws(Invalid) -> [HubUser] {
        guard case .array(let entries) = value else { throw Invalid(path: path, message: "must be an array of users") }
        var users: [HubUser] = []
        var names = Set<String>()
        for (index, entry) in entries.enumerated() {
            let here = "\(path)[\(index)]"
            guard case .object(let object) = entry else {
                throw Invalid(path: here, message: "must be an object such as {\"name\": \"ana\", \"role\": \"staff\", \"tokenSha256\": \"…\"}")
            }
            try known(object, here, ["name", "role", "tokenSha256", "tokenEnv"])
            let name = try string(object["name"] ?? .null, "\(here).name")
            guard names.insert(name).inserted else { throw Invalid(path: "\(here).name", message: "\"\(name)\" is listed twice") }
            let role = try string(object["role"] ?? .null, "\(here).role")
            let hash: [UInt8]
            switch (object["tokenSha256"], object["tokenEnv"]) {
            case (let hex?, nil):
                guard case .string(let text) = hex, let bytes = hexBytes(text), bytes.count == 32 else {
                    throw Invalid(path: "\(here).tokenSha256",
                                  message: "must be 64 hex digits: the SHA-256 of the token (e.g. printf %s TOKEN | sha256sum)")
                }
                hash = bytes
            case (nil, let env?):
                let variable = try string(env, "\(here).tokenEnv")
                guard let token = getenv(variable).map({ String(cString: $0) }), !token.isEmpty else {
                    throw Invalid(path: "\(here).tokenEnv", message: "the environment variable \(variable) is not set (or is empty)")
                }
                hash = Authenticator.sha256(Array(token.utf8))
            default:
                throw Invalid(path: here, message: "give exactly one of \"tokenSha256\" and \"tokenEnv\"")
            }
            users.append(HubUser(name: name, role: role, tokenHash: hash))
        }
        return users
    }

    static func parseRoles(_ value: JSONValue, _ path: String) throws(Invalid) -> [String: [AccessRule]] {
        guard case .object(let object) = value else {
            throw Invalid(path: path, message: "must be an object from role name to its rules")
        }
        var roles: [String: [AccessRule]] = [:]
        for (role, rulesValue) in object {
            let here = "\(path).\(role)"
            guard case .array(let entries) = rulesValue else {
                throw Invalid(path: here, message: "must be an array of rules such as {\"names\": \"orders/*\", \"allow\": [\"read\"]}")
            }
            var rules: [AccessRule] = []
            for (index, entry) in entries.enumerated() {
                let at = "\(here)[\(index)]"
                guard case .object(let rule) = entry else { throw Invalid(path: at, message: "must be an object") }
                try known(rule, at, ["names", "allow", "own"])
                let names = try string(rule["names"] ?? .null, "\(at).names")
                guard case .array(let allowValues)? = rule["allow"] else {
                    throw Invalid(path: "\(at).allow", message: "must be an array of operations: read, write, create, delete, subscribe, publish")
                }
                var allow = Set<Permission>()
                for (position, operation) in allowValues.enumerated() {
                    guard case .string(let text) = operation, let permission = Permission(rawValue: text) else {
                        throw Invalid(path: "\(at).allow[\(position)]", message: "must be one of read, write, create, delete, subscribe, publish")
                    }
                    allow.insert(permission)
                }
                var own = false
                if let ownValue = rule["own"] {
                    guard case .bool(let flag) = ownValue else { throw Invalid(path: "\(at).own", message: "must be true or false") }
                    own = flag
                }
                rules.append(AccessRule(names, allow, own: own))
            }
            roles[role] = rules
        }
        return roles
    }

    /// Workflows by prefix; `null` removes a shipped one.
    static func parseWorkflows(_ value: JSONValue, _ path: String) throws(Invalid) -> [String: Workflow?] {
        guard case .object(let object) = value else {
            throw Invalid(path: path, message: "must be an object from record prefix (e.g. \"orders/\") to its workflow")
        }
        var result: [String: Workflow?] = [:]
        for (prefix, entry) in object {
            let here = "\(path).\(prefix)"
            guard prefix.hasSuffix("/"), prefix.utf8.count > 1 else {
                throw Invalid(path: here, message: "a workflow is declared for a record prefix ending in '/', e.g. \"orders/\"")
            }
            if entry == .null { result[prefix] = .some(nil); continue }
            guard case .object(let spec) = entry else { throw Invalid(path: here, message: "must be an object (or null to remove it)") }
            try known(spec, here, ["stageField", "stages", "transitions", "terminal", "roles", "deleteRoles", "stats", "list",
                                   "kind", "reasonRequired", "stockStage", "maxPhotos"])
            let base = WorkflowSet.defaults.workflow(prefix: prefix)
            let stages = try spec["stages"].map { v throws(Invalid) in try strings(v, "\(here).stages") } ?? base?.stages
            guard let stages else { throw Invalid(path: "\(here).stages", message: "is missing: list the stages in order") }
            var transitions = base?.transitions ?? [:]
            if let value = spec["transitions"] {
                guard case .object(let map) = value else {
                    throw Invalid(path: "\(here).transitions", message: "must map each stage to the stages it may move to")
                }
                transitions = [:]
                for (from, targets) in map { transitions[from] = try strings(targets, "\(here).transitions.\(from)") }
            }
            let terminal = try spec["terminal"].map { v throws(Invalid) in Set(try strings(v, "\(here).terminal")) }
                ?? base?.terminal ?? []
            var roles = base?.roles ?? ["*": ["admin", "staff"]]
            if let value = spec["roles"] {
                guard case .object(let map) = value else {
                    throw Invalid(path: "\(here).roles", message: "must map \"*\" or \"from->to\" to a list of roles")
                }
                roles = [:]
                for (key, list) in map { roles[key] = Set(try strings(list, "\(here).roles.\(key)")) }
            }
            var flow = Workflow(prefix: prefix, stages: stages, transitions: transitions, terminal: terminal, roles: roles)
            flow.stageField = try spec["stageField"].map { v throws(Invalid) in try string(v, "\(here).stageField") } ?? base?.stageField ?? "stage"
            flow.deleteRoles = try spec["deleteRoles"].map { v throws(Invalid) in Set(try strings(v, "\(here).deleteRoles")) } ?? base?.deleteRoles ?? ["admin"]
            flow.stats = try optionalName(spec["stats"], "\(here).stats") ?? base?.stats
            flow.list = try optionalName(spec["list"], "\(here).list") ?? base?.list
            if let kind = spec["kind"] {
                guard case .string(let text) = kind, let parsed = Workflow.Kind(rawValue: text) else {
                    throw Invalid(path: "\(here).kind", message: "must be \"plain\", \"order\" or \"intake\"")
                }
                flow.kind = parsed
            } else {
                flow.kind = base?.kind ?? .plain
            }
            flow.reasonRequired = try spec["reasonRequired"].map { v throws(Invalid) in Set(try strings(v, "\(here).reasonRequired")) } ?? base?.reasonRequired ?? []
            flow.stockStage = try spec["stockStage"].map { v throws(Invalid) in try string(v, "\(here).stockStage") } ?? base?.stockStage
            flow.maxPhotos = try spec["maxPhotos"].map { v throws(Invalid) in try int(v, "\(here).maxPhotos", 0...1000) } ?? base?.maxPhotos
            if flow.kind == .order, flow.stockStage == nil { flow.stockStage = flow.stages.contains("delivered") ? "delivered" : nil }
            if let problem = flow.validate() { throw Invalid(path: "\(here).\(problem.field)", message: problem.message) }
            result[prefix] = flow
        }
        return result
    }

    private static func optionalName(_ value: JSONValue?, _ path: String) throws(Invalid) -> String? {
        guard let value else { return nil }
        let name = try string(value, path)
        do { try Names.validate(name, field: "name") } catch { throw Invalid(path: path, message: error.message) }
        return name
    }

    private static func strings(_ value: JSONValue, _ path: String) throws(Invalid) -> [String] {
        guard case .array(let values) = value else { throw Invalid(path: path, message: "must be an array of strings") }
        var result: [String] = []
        for (index, element) in values.enumerated() {
            guard case .string(let text) = element, !text.isEmpty else {
                throw Invalid(path: "\(path)[\(index)]", message: "must be a non-empty string")
            }
            result.append(text)
        }
        return result
    }

    private static func known(_ object: JSONObject, _ path: String, _ keys: Set<String>) throws(Invalid) {
        for (key, _) in object where !keys.contains(key) {
            throw Invalid(path: "\(path).\(key)", message: "unknown setting; known: \(keys.sorted().joined(separator: ", "))")
        }
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.lowercased().utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for pair in stride(from: 0, to: digits.count, by: 2) {
            guard let high = hexDigit(digits[pair]), let low = hexDigit(digits[pair + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}

extension HubConfigFile {
    /// The access policy: the shipped roles with the file's over them.
    public var policy: AccessPolicy {
        AccessPolicy(roles: AccessPolicy.defaultRoles.merging(roles) { _, configured in configured })
    }

    /// The shipped workflows with the file's over them.
    public var workflowSet: WorkflowSet {
        var byPrefix: [String: Workflow] = [:]
        for flow in WorkflowSet.defaults.workflows { byPrefix[flow.prefix] = flow }
        for (prefix, flow) in workflows { byPrefix[prefix] = flow }
        return WorkflowSet(Array(byPrefix.values))
    }
}
