import TallyClient
import TallyProtocol

/// What a write does to a local copy of a record: the mirror shows its
/// own writes at once by applying them to its copy the way the hub will.
/// Pure.
public enum LocalEffect {
    /// `data` after `op` (a protocol write object), or nil when the record
    /// is gone. Paths that do not fit leave the copy as it was (the hub
    /// will refuse the write and the entry will be reported as failed).
    public static func apply(_ op: JSONObject, to data: JSONObject?, rule: WorkflowRule?) -> JSONObject? {
        switch op["op"]?.stringValue {
        case "set":
            if let path = op["path"]?.stringValue {
                guard let parsed = try? RecordPath(parsing: path),
                      let next = try? JSONValue.object(data ?? [:]).setting(op["value"] ?? .null, at: parsed) else { return data }
                return next.objectValue ?? data
            }
            var next = op["data"]?.objectValue ?? [:]
            if let rule {
                if let data {
                    // A whole-record set keeps the members the hub keeps.
                    for field in rule.protectedFields where next[field] == nil { next[field] = data[field] }
                } else if next[rule.stageField] == nil, let first = rule.stages.first {
                    next[rule.stageField] = .string(first)
                }
            }
            return next
        case "merge":
            guard let data else { return nil }
            return data.mergePatched(with: op["data"]?.objectValue ?? [:])
        case "delete":
            guard let path = op["path"]?.stringValue else { return nil }
            guard let data, let parsed = try? RecordPath(parsing: path) else { return data }
            let current = JSONValue.object(data)
            guard current.value(at: parsed) != nil, let next = try? current.removing(at: parsed) else { return data }
            return next.objectValue ?? data
        case "advance":
            guard var next = data else { return nil }
            if let to = op["to"]?.stringValue { next[rule?.stageField ?? "stage"] = .string(to) }
            if let patch = op["data"]?.objectValue { next = next.mergePatched(with: patch) }
            return next
        default:
            return data
        }
    }
}
