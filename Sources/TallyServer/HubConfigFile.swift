import Glibc
import TallyEngine
import TallyProtocol
import TallyStore

/// `tally serve --config FILE`: a JSON object whose members set what the
/// flags set (flags given on the command line win). Unknown members and
/// wrong types are refused with the JSON path of the offending entry, so a
/// typo never silently falls back to a default.
///
/// ```json
/// {
///   "host": "127.0.0.1", "port": 8080, "threads": 2,
///   "data": "/var/lib/tally", "hubName": "storeroom-1", "durability": "full",
///   "retention": {"changes": 1000000, "bytes": 1073741824, "ageSeconds": 604800},
///   "maxRecordSize": 1048576, "maxMessageSize": 16777216,
///   "maxBlobSize": 16777216, "blobQuota": 10737418240,
///   "analysis": {"enabled": true, "ocr": false, "timeout": "30s", "workers": 1}
/// }
/// ```
public struct HubConfigFile: Sendable {
    public var host: String?
    public var port: Int?
    public var threads: Int?
    public var data: String?
    /// This hub's name in `GET /v1/admin/clients` (`HubName`).
    public var hubName: String?
    public var durability: Durability?
    public var retainChanges: Int?
    public var retainBytes: Int?
    public var retainAgeSeconds: Double?
    public var maxRecordSize: Int?
    public var maxMessageSize: Int?
    public var maxBlobSize: Int?
    public var echo: Bool?
    public var allowOrigins: [String]?
    public var allowHosts: [String]?
    public var maxSubscriptions: Int?
    /// The stock at or below which an item without its own `lowStock` is low.
    public var lowStock: Int?
    public var maxUnauthenticated: Int?
    /// The other hubs of this hub's cluster (`PeerHubs`).
    public var peers: PeerHubs?
    /// Most bytes all blobs together may hold.
    public var blobQuota: Int?
    /// The record cache's bound in bytes (`CoreConfiguration.cacheBytes`).
    public var cacheSize: Int?
    /// Configured users; any at all turns authentication on.
    public var users: [HubUser]?
    /// Roles defined or redefined over the shipped ones.
    public var roles: [String: [AccessRule]] = [:]
    /// Workflows by prefix over the shipped ones (nil removes one).
    public var workflows: [String: Workflow?] = [:]
    /// Record indexes for live queries beyond the built-in ones.
    public var indexes: [RecordIndex] = []
    /// The `analysis` section (`AnalysisSettings`).
    public var analysis: AnalysisSettings?

    public struct Invalid: Error, CustomStringConvertible {
        public var path: String
        public var message: String
        /// The JSON path of the offending entry; empty when the file as a
        /// whole is the problem (unreadable, not JSON).
        public var description: String { path.isEmpty ? message : "\(path): \(message)" }
    }

    public static func load(path: String) throws(Invalid) -> HubConfigFile {
        guard let contents = readFile(path) else {
            throw Invalid(path: "", message: "cannot read the file: \(String(cString: strerror(errno)))")
        }
        let value: JSONValue
        do { value = try JSONValue.parse(Array(contents)) } catch {
            throw Invalid(path: "", message: "not valid JSON: \(error.message)")
        }
        return try parse(value)
    }

    public static func parse(_ value: JSONValue) throws(Invalid) -> HubConfigFile {
        guard case .object(let root) = value else { throw Invalid(path: "$", message: "must be a JSON object") }
        var file = HubConfigFile()
        for (key, member) in root {
            let path = "$.\(key)"
            switch key {
            case "host": file.host = try string(member, path)
            case "port": file.port = try int(member, path, 0...65535)
            case "threads": file.threads = try int(member, path, 1...256)
            case "data": file.data = try string(member, path)
            case "hubName":
                let name = try string(member, path)
                if let problem = HubName.problem(name) { throw Invalid(path: path, message: problem) }
                file.hubName = name
            case "durability":
                let text = try string(member, path)
                guard let durability = Durability(rawValue: text) else {
                    throw Invalid(path: path, message: "must be \"full\", \"normal\" or \"off\", not \"\(text)\"")
                }
                file.durability = durability
            case "maxRecordSize": file.maxRecordSize = try int(member, path, 1...(1 << 30))
            case "maxMessageSize": file.maxMessageSize = try int(member, path, 1...(1 << 30))
            case "maxBlobSize": file.maxBlobSize = try int(member, path, 1...(1 << 30))
            case "echo":
                guard case .bool(let echo) = member else { throw Invalid(path: path, message: "must be true or false") }
                file.echo = echo
            case "allowOrigins":
                file.allowOrigins = try strings(member, path) { BrowserGuard.normalizedOrigin($0) != nil ? nil :
                    "must be an origin such as \"https://app.example\" (scheme, host, optional port; no path)" }
            case "allowHosts":
                file.allowHosts = try strings(member, path) { BrowserGuard.isHostName($0) ? nil :
                    "must be a host name such as \"tally.local\" (no scheme or port)" }
            case "peers":
                let list = try strings(member, path, PeerHubs.problem)
                do { file.peers = try PeerHubs(list) } catch {
                    throw Invalid(path: "\(path)[\(error.index)]", message: error.message)
                }
            case "maxSubscriptions": file.maxSubscriptions = try int(member, path, 1...10_000_000)
            case "lowStock": file.lowStock = try int(member, path, 0...2_147_483_647)
            case "maxUnauthenticated": file.maxUnauthenticated = try int(member, path, 1...10_000_000)
            case "blobQuota": file.blobQuota = try int(member, path, 1...(1 << 40))
            case "cacheSize": file.cacheSize = try int(member, path, (1 << 20)...(1 << 40))
            case "users": file.users = try parseUsers(member, path)
            case "roles": file.roles = try parseRoles(member, path)
            case "workflows": file.workflows = try parseWorkflows(member, path)
            case "indexes": file.indexes = try parseIndexes(member, path)
            case "analysis": file.analysis = try AnalysisSettings.parse(member, path)
            case "retention":
                guard case .object(let retention) = member else { throw Invalid(path: path, message: "must be an object") }
                for (inner, innerValue) in retention {
                    let innerPath = "\(path).\(inner)"
                    switch inner {
                    case "changes": file.retainChanges = try int(innerValue, innerPath, 1...Int(Int32.max))
                    case "bytes": file.retainBytes = try int(innerValue, innerPath, 1...(1 << 40))
                    case "ageSeconds":
                        guard case .number(let number) = innerValue, number.doubleValue > 0,
                              number.doubleValue <= 3650 * 86_400 else {
                            throw Invalid(path: innerPath, message: "must be a number of seconds greater than 0 and at most 315360000 (10 years)")
                        }
                        file.retainAgeSeconds = number.doubleValue
                    default: throw Invalid(path: innerPath, message: "unknown setting; use \"changes\", \"bytes\" or \"ageSeconds\"")
                    }
                }
            default:
                throw Invalid(path: path, message: "unknown setting; known: host, port, threads, data, hubName, durability, retention, maxRecordSize, maxMessageSize, maxBlobSize, blobQuota, cacheSize, echo, allowOrigins, allowHosts, peers, maxSubscriptions, maxUnauthenticated, lowStock, users, roles, workflows, indexes, analysis")
            }
        }
        // Every role a user or a workflow names must exist.
        let roleNames = Set(AccessPolicy.defaultRoles.keys).union(file.roles.keys)
        for (index, user) in (file.users ?? []).enumerated() where !roleNames.contains(user.role) {
            throw Invalid(path: "$.users[\(index)].role", message: "unknown role \"\(user.role)\"; known: \(roleNames.sorted().joined(separator: ", "))")
        }
        for (prefix, flow) in file.workflows.sorted(by: { $0.key < $1.key }) {
            guard let flow else { continue }
            for (key, roles) in flow.roles.sorted(by: { $0.key < $1.key }) {
                if let bad = roles.sorted().first(where: { !roleNames.contains($0) }) {
                    throw Invalid(path: "$.workflows.\(prefix).roles.\(key)", message: "unknown role \"\(bad)\"; known: \(roleNames.sorted().joined(separator: ", "))")
                }
            }
            if let bad = flow.deleteRoles.sorted().first(where: { !roleNames.contains($0) }) {
                throw Invalid(path: "$.workflows.\(prefix).deleteRoles", message: "unknown role \"\(bad)\"; known: \(roleNames.sorted().joined(separator: ", "))")
            }
        }
        return file
    }

    /// The whole file, or nil (errno says why); config files are small.
    static func readFile(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            contents.append(contentsOf: chunk[..<count])
            if count < chunk.count { return ferror(file) == 0 ? contents : nil }
            if contents.count > 16 << 20 { errno = EFBIG; return nil }
        }
    }

    /// `[{"prefix": "items/", "path": "location"}, …]`.
    static func parseIndexes(_ value: JSONValue, _ path: String) throws(Invalid) -> [RecordIndex] {
        guard case .array(let entries) = value, entries.count <= 64 else {
            throw Invalid(path: path, message: "must be an array of at most 64 indexes, each {\"prefix\": \"items/\", \"path\": \"location\"}")
        }
        var indexes: [RecordIndex] = []
        for (index, entry) in entries.enumerated() {
            let here = "\(path)[\(index)]"
            guard case .object(let object) = entry, object.count == 2,
                  case .string(let prefix)? = object["prefix"], case .string(let pathText)? = object["path"] else {
                throw Invalid(path: here, message: "must be {\"prefix\": \"items/\", \"path\": \"location\"} (a name prefix and a record path)")
            }
            do { try Names.validatePrefix(prefix, field: "prefix") } catch {
                throw Invalid(path: here + ".prefix", message: error.message)
            }
            guard let parsed = try? RecordPath(parsing: pathText), case .key? = parsed.segments.first else {
                throw Invalid(path: here + ".path", message: "must be a record path that starts with a key, e.g. \"location\" or \"lines[0].sku\"")
            }
            indexes.append(RecordIndex(prefix: prefix, path: parsed))
        }
        return indexes
    }

    static func string(_ value: JSONValue, _ path: String) throws(Invalid) -> String {
        guard case .string(let text) = value, !text.isEmpty else { throw Invalid(path: path, message: "must be a non-empty string") }
        return text
    }

    /// An array of strings, each checked by `problem` (nil when fine).
    static func strings(_ value: JSONValue, _ path: String, _ problem: (String) -> String?) throws(Invalid) -> [String] {
        guard case .array(let items) = value else { throw Invalid(path: path, message: "must be an array of strings") }
        var result: [String] = []
        for (index, item) in items.enumerated() {
            let text = try string(item, "\(path)[\(index)]")
            if let problem = problem(text) { throw Invalid(path: "\(path)[\(index)]", message: problem) }
            result.append(text)
        }
        return result
    }

    static func int(_ value: JSONValue, _ path: String, _ range: ClosedRange<Int>) throws(Invalid) -> Int {
        guard case .number(let number) = value, let int = number.int64Value, number.isInteger, range.contains(Int(int)) else {
            throw Invalid(path: path, message: "must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(int)
    }
}
