import TallyProtocol

/// One accepted change: the new state, the bytes to persist and push, and
/// what subscribers need to decide whether it concerns them.
public struct Change: Sendable {
    public enum Target: Sendable {
        /// `after` is nil when the record was deleted.
        case record(before: RecordState?, after: RecordState?, scope: RecordScope)
        /// `edit` is what the change did to the list's rows.
        case list(before: ListState?, after: ListState?, edit: ListEdit)
    }

    /// Which part of a record a change touched, for path subscriptions.
    public enum RecordScope: Sendable {
        /// The whole data was replaced (set, merge, creation, deletion).
        case whole
        /// Only the value at this path changed.
        case path(RecordPath)
    }

    public var seq: Int64
    public var time: Int64
    public var name: String
    public var target: Target
    /// The push message, serialized once (PROTOCOL.md, "Pushes").
    public var push: [UInt8]
    /// The reply's members for this change (`name`/`list`, `version`, `seq`, …).
    public var reply: JSONObject

    public init(seq: Int64, time: Int64, name: String, target: Target, push: [UInt8], reply: JSONObject) {
        self.seq = seq
        self.time = time
        self.name = name
        self.target = target
        self.push = push
        self.reply = reply
    }

    public var isList: Bool {
        if case .list = target { return true }
        return false
    }
}
