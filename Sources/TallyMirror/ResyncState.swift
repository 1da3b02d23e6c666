import TallyClient
import TallyProtocol

/// Where a resync of `mirror run` stands: the phase a user waits through
/// and how far it has come. A resync starts when the run (re)connects and
/// ends once it is live with the writes that waited in the outbox replayed.
/// Shown on stderr by `mirror run` and, from the store's `meta`, by
/// `mirror status` (another process).
public struct ResyncState: Sendable, Equatable {
    public enum Phase: String, Sendable, CaseIterable {
        /// A delay before the next step: the hub's `retryAfterMs` after it
        /// restarted, or the backoff before the next connection attempt.
        case waiting
        /// Opening the connection and saying hello.
        case connecting
        /// The subscriptions' answers on their way; a large snapshot arrives
        /// page by page.
        case receiving
        /// A snapshot or missed changes going into the store, in chunks.
        case applying
        /// The outbox's writes going out, each confirmed by the hub.
        case replaying
    }

    public var phase: Phase
    /// What the phase works on (`prefix:items/`), if it is one subscription's.
    public var target: String?
    /// waiting: milliseconds waited; connecting: the attempt's number;
    /// receiving: records received; applying: records or changes stored;
    /// replaying: outbox entries confirmed (or refused).
    public var done: Int
    /// What `done` counts up to; nil when nobody knows (connecting,
    /// receiving: the hub does not say how large a snapshot is).
    public var total: Int?

    public init(phase: Phase, target: String? = nil, done: Int = 0, total: Int? = nil) {
        self.phase = phase
        self.target = target
        self.done = done
        self.total = total
    }

    public var percent: Int? {
        guard let total else { return nil }
        return total > 0 ? min(100, done * 100 / total) : 100
    }

    /// `{"phase","target","done","total"}` (`mirror status --json`).
    public var json: JSONObject {
        ["phase": .string(phase.rawValue), "target": target.map(JSONValue.string) ?? .null,
         "done": .int(Int64(done)), "total": total.map { .int(Int64($0)) } ?? .null]
    }

    public init?(json: JSONObject) {
        guard let phase = json["phase"]?.stringValue.flatMap(Phase.init(rawValue:)),
              let done = json["done"]?.int64 else { return nil }
        self.init(phase: phase, target: json["target"]?.stringValue, done: Int(done), total: json["total"]?.int64.map { Int($0) })
    }

    /// One line: the phase, then how far (`applying 45% 45000/100000 (prefix:items/)`).
    public var summary: String {
        var text = phase.rawValue
        switch phase {
        case .connecting:
            text += done > 1 ? " (attempt \(done))" : ""
        case .receiving where done == 0:
            text += " (waiting for the hub's answers)"
        default:
            if let total, let percent { text += " \(percent)% \(done)/\(total)" } else { text += " \(done)" }
            switch phase {
            case .waiting: text += " ms"
            case .receiving: text += " records"
            case .replaying: text += " outbox entries"
            default: break
            }
        }
        if let target { text += " (\(target))" }
        return text
    }

    /// Large enough for a progress line on stderr: a log that says
    /// "connecting" and "applying 3/3" at every reconnect says nothing.
    public var worthShowing: Bool {
        switch phase {
        case .waiting: (total ?? 0) >= 1000
        case .connecting: false
        case .receiving: done > 0
        case .applying: (total ?? 0) > 1000
        case .replaying: (total ?? 0) > 100
        }
    }
}

/// The current resync state and when to store it: the store's `meta` is
/// written in a SQLite transaction (an fsync), so a resync starting or
/// ending is stored at once and anything in between at most every
/// `interval` milliseconds. Pure: time comes in as `now`.
struct ResyncTracker {
    static let interval: Int64 = 250

    private(set) var current: ResyncState?
    /// When the current phase began (a wait's `done` counts from it).
    private var since: Int64 = 0
    /// What the store holds (nil: no resync; the run clears it at start).
    private var stored: ResyncState?
    private var storedAt: Int64 = .min

    /// The resync is now `state` (nil: none).
    mutating func set(_ state: ResyncState?, now: Int64) {
        if state?.phase != current?.phase || state?.target != current?.target { since = now }
        current = state
    }

    /// Moves a wait's `done` on with the clock.
    mutating func refresh(now: Int64) {
        guard var state = current, state.phase == .waiting, let total = state.total else { return }
        state.done = Int(min(Int64(total), max(0, now - since)))
        current = state
    }

    /// The state to store now, if it is due: `.some(nil)` says "no resync".
    mutating func due(now: Int64) -> ResyncState?? {
        guard current != stored else { return .none }
        let edge = (current == nil) != (stored == nil)
        guard edge || now - storedAt >= Self.interval else { return .none }
        stored = current
        storedAt = now
        return .some(current)
    }
}
