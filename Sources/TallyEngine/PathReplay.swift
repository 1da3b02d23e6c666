import TallyProtocol

/// Decides, from a record's change log alone, which changes a subscription to
/// one path of it would have been pushed live — so a resume replays exactly
/// those (PROTOCOL.md, "Delivery guarantees" 5).
///
/// Live delivery compares the value under the path before and after a
/// whole-record write. A replay has only the pushes, so it tracks the value
/// under the path as it reads them from the oldest retained change; where a
/// push does not determine it (a change inside the watched value, an array
/// element removed before it), the value becomes unknown and the next
/// whole-record write is delivered rather than risk dropping a real change.
public struct PathReplay {
    enum Tracked: Equatable {
        case unknown
        case known(exists: Bool, value: JSONValue?)
    }

    public let path: RecordPath
    private var tracked: Tracked

    /// `logIsComplete`: the log reaches back to the hub's first change, so the
    /// record did not exist before the first change read.
    public init(path: RecordPath, logIsComplete: Bool) {
        self.path = path
        tracked = logIsComplete ? .known(exists: false, value: nil) : .unknown
    }

    /// Feeds the next push (in seq order); returns whether a live subscriber
    /// to `path` received it.
    public mutating func concerns(_ push: JSONObject) -> Bool {
        let changedPath = push["path"]?.stringValue.flatMap { try? RecordPath(parsing: $0) }
        switch push["kind"]?.stringValue {
        case "set":
            let new = push["data"]?.value(at: path)
            defer { tracked = .known(exists: true, value: new) }
            guard case .known(let exists, let old) = tracked, exists else { return true }
            return old != new
        case "delete":
            tracked = .known(exists: false, value: nil)
            return true
        case "setPath":
            guard let changed = changedPath else { tracked = .unknown; return true }
            let value = push["value"]
            // Version 1 is a creation (also after a deletion), which every
            // path subscriber receives.
            let created = push["version"] == .number(JSONNumber(1))
            if changed.isPrefix(of: path) {
                tracked = .known(exists: true, value: value.flatMap { path.value(in: $0, below: changed) })
            } else if path.isPrefix(of: changed) {
                tracked = .unknown
            } else if case .known(_, let old) = tracked {
                tracked = .known(exists: true, value: created ? nil : old)
            } else if created {
                tracked = .known(exists: true, value: nil)
            }
            return created || changed.overlaps(path)
        case "deletePath":
            guard let changed = changedPath else { tracked = .unknown; return true }
            let shifts: Bool
            if case .index? = changed.segments.last { shifts = true } else { shifts = false }
            if changed.isPrefix(of: path) {
                tracked = shifts ? .unknown : .known(exists: true, value: nil)
            } else if path.isPrefix(of: changed) {
                tracked = .unknown
            } else if shifts, changed.parent.map({ $0.isPrefix(of: path) }) ?? true {
                tracked = .unknown
            } else if case .known(_, let old) = tracked {
                tracked = .known(exists: true, value: old)
            }
            return changed.overlaps(path)
        default:
            tracked = .unknown
            return true
        }
    }
}
