import TallyProtocol

/// A write waiting in an outbox for the hub's answer: one of the mirror's
/// local writes, one stage of an intake job.
public protocol OutboxReplayable: Sendable {
    /// Its place in the outbox: entries go out in increasing order.
    var replayID: Int64 { get }
    /// What it writes (a record's name). At most one entry of a lane is in
    /// flight, so a record's writes reach the hub in outbox order.
    var replayLane: String { get }
}

/// The one outbox replay loop of the client stack, as a pure state machine:
/// which queued writes go out now, what happens to one once the hub
/// answered, and what a lost connection does to those in flight. The
/// owner performs the sends and keeps the outbox on disk (the mirror on
/// its client's queue, a window of 64 over many records; the intake runner
/// on the caller's thread, a job's stages one at a time).
///
/// The rules both outboxes rely on:
/// - Entries go out in outbox order, at most `window` in flight, at most
///   one per lane.
/// - Every attempt of an entry is the same write with the same idempotency
///   key (the owner builds the message from the entry), so an entry whose
///   reply was lost — a dropped connection, a crash before the outbox
///   recorded the answer — is applied once and answered with the hub's
///   first reply when it goes out again.
/// - An entry leaves the line only when the hub answered it (`settle`):
///   confirmed, or refused for good (`ReplayFailure.setAside`). A failure
///   that says nothing about the write (`ReplayFailure.keep`) puts it back
///   at its place (`putBack`).
/// - A reply to a send made before the last `restart` is stale and
///   ignored (`inflight(_:epoch:)` answers nil): it is answered again.
public struct OutboxReplay<Entry: OutboxReplayable>: Sendable {
    /// Entries in flight at once.
    public let window: Int
    /// Bumped by every `restart`: a reply to a send of an earlier epoch is stale.
    public private(set) var epoch = 0
    /// Entries waiting to go out, in outbox order.
    public private(set) var queued: [Entry] = []
    /// Entries sent and not yet answered, by id.
    public private(set) var inflight: [Int64: Entry] = [:]
    private var busyLanes: Set<String> = []
    /// The newest id ever queued: the next read of the outbox starts after it.
    public private(set) var newestID: Int64 = 0

    public init(window: Int) {
        self.window = max(1, window)
    }

    /// Appends entries read from the outbox, in outbox order.
    public mutating func enqueue(_ entries: some Sequence<Entry>) {
        for entry in entries {
            queued.append(entry)
            newestID = max(newestID, entry.replayID)
        }
    }

    /// The entries to send now, marked in flight: outbox order, up to the
    /// window, skipping a lane whose earlier entry is still unanswered.
    public mutating func takeSendable() -> [Entry] {
        var sendable: [Entry] = []
        var index = 0
        while inflight.count < window, index < queued.count {
            let entry = queued[index]
            if busyLanes.contains(entry.replayLane) {
                index += 1
                continue
            }
            queued.remove(at: index)
            inflight[entry.replayID] = entry
            busyLanes.insert(entry.replayLane)
            sendable.append(entry)
        }
        return sendable
    }

    /// The entry a reply is for; nil when the reply is stale (sent before
    /// the last `restart`) or the entry was answered already.
    public func inflight(_ id: Int64, epoch: Int) -> Entry? {
        guard epoch == self.epoch else { return nil }
        return inflight[id]
    }

    /// The hub answered for good (confirmed, or refused): the entry leaves
    /// and its lane is free.
    @discardableResult
    public mutating func settle(_ id: Int64) -> Entry? {
        guard let entry = inflight.removeValue(forKey: id) else { return nil }
        busyLanes.remove(entry.replayLane)
        return entry
    }

    /// The entry goes out again at once as it now is (the next step of its
    /// plan, a merge's rewrite): it stays in flight and keeps its lane.
    public mutating func resend(_ entry: Entry) {
        inflight[entry.replayID] = entry
        busyLanes.insert(entry.replayLane)
    }

    /// A failure that says nothing about the write: back in line at its
    /// place, to go out again with the same key.
    public mutating func putBack(_ entry: Entry) {
        if inflight.removeValue(forKey: entry.replayID) != nil { busyLanes.remove(entry.replayLane) }
        let index = queued.firstIndex { $0.replayID > entry.replayID } ?? queued.endIndex
        queued.insert(entry, at: index)
    }

    /// The connection changed: replies still due are stale, and what was in
    /// flight goes back to the front of the line.
    public mutating func restart() {
        epoch += 1
        guard !inflight.isEmpty else { return }
        queued = (Array(inflight.values) + queued).sorted { $0.replayID < $1.replayID }
        inflight = [:]
        busyLanes = []
    }

    /// Changes the entries still waiting (an earlier write's answer moved
    /// what later ones are based on).
    public mutating func updateQueued(_ body: (inout Entry) -> Void) {
        for index in queued.indices { body(&queued[index]) }
    }
}

/// What a failed attempt means for an outbox entry: the one rule both
/// outboxes use to stop (and keep) or set aside.
public enum ReplayFailure: Sendable, Equatable {
    /// The failure says nothing about the write — the connection, the hub's
    /// storage, its database out of reach (`unavailable`) or shutdown, a
    /// token to fix, too many requests, an HTTP 5xx, 408 or 429: keep the
    /// entry and send it again later with its key.
    case keep
    /// The hub said no to this write; sending it again will not change that.
    case setAside

    /// Error codes that say nothing about the write itself.
    static let keptCodes: Set<ErrorCode> = [.disconnected, .timeout, .shuttingDown, .storageFailed, .unavailable,
                                           .unauthorized, .badReply, ErrorCode(rawValue: "too_many_requests")]

    /// - Parameter httpStatus: the status of a REST answer, if it was one.
    public init(code: ErrorCode, httpStatus: Int? = nil) {
        if Self.keptCodes.contains(code) { self = .keep; return }
        if let status = httpStatus, status >= 500 || status == 429 || status == 408 { self = .keep; return }
        self = .setAside
    }

    /// A failure of the asynchronous client (its own codes included).
    public init(_ error: ProtocolError) {
        self.init(code: error.code)
    }

    /// A failure of a one-shot call: anything but the hub's refusal is kept.
    public init(_ error: HubError, httpStatus: Int? = nil) {
        guard case .refused(let object) = error else { self = .keep; return }
        self.init(code: ErrorCode(rawValue: object["code"]?.stringValue ?? ""), httpStatus: httpStatus)
    }
}
