@preconcurrency import Glibc
import TallyClient
import TallyProtocol

/// What `tally mirror status` reports about a store: whether a `mirror run`
/// holds it and is connected, the hub, how far it has applied, the writes
/// waiting or refused, open conflicts, the last error and the resync under
/// way. Read without taking the run's lock, and without creating the store.
public struct MirrorStatus: Sendable {
    public var store: String
    /// False when there is no store file yet (a run that is just starting).
    public var exists: Bool
    /// A `mirror run` holds the store's lock.
    public var running: Bool
    /// That run is connected to the hub.
    public var online: Bool
    /// The hub, or the comma-separated hubs of one cluster, the run uses.
    public var server: String?
    /// The hub of that list the run is connected to (nil when offline).
    public var connectedTo: String?
    public var lastSeq: Int64
    public var outbox: Int64
    public var failed: Int
    /// The writes the hub refused for good, oldest first (at most
    /// `maxRefusedListed`): what they wrote and why the hub said no.
    public var refused: [OutboxEntry] = []
    public static let maxRefusedListed = 100
    public var conflicts: Int
    public var lastError: String?
    public var lastErrorAt: Int64?
    public var patterns: [String]
    public var client: String?
    /// Stored by the run as it goes (nil unless a run holds the store).
    public var resync: ResyncState?

    public static func read(store path: String) throws(MirrorStoreError) -> MirrorStatus {
        let running = try MirrorRunLock.isHeld(store: path)
        var status = MirrorStatus(store: path, exists: false, running: running, online: false, server: nil, lastSeq: 0,
                                  outbox: 0, failed: 0, conflicts: 0, lastError: nil, lastErrorAt: nil, patterns: [],
                                  client: nil, resync: nil)
        guard access(path, F_OK) == 0 else { return status }
        let store = try MirrorStore.open(path, create: false)
        status.exists = true
        let online = try store.meta("online")
        status.online = running && online == "1"
        status.server = try store.meta("hub")
        status.connectedTo = status.online ? try store.meta("hub_live") : nil
        let cursors = try store.cursors()
        status.lastSeq = Int64(try store.meta("last_seq") ?? "") ?? cursors.values.max() ?? 0
        status.outbox = try store.outboxDepth()
        let failed = try store.failedEntries()
        status.failed = failed.count
        status.refused = Array(failed.suffix(Self.maxRefusedListed))
        status.conflicts = try store.conflicts().count
        status.lastError = try store.meta("last_error")
        status.patterns = (try store.meta("patterns")).flatMap { try? JSONValue.parse($0) }?.arrayValue?
            .compactMap(\.stringValue) ?? []
        status.client = try store.meta("client")
        // A run that was killed left its last one behind.
        status.resync = running ? (try store.meta("resync")).flatMap { try? JSONValue.parse($0) }?.objectValue
            .flatMap(ResyncState.init(json:)) : nil
        status.lastErrorAt = (try store.meta("last_error_at")).flatMap { Int64($0) }
        return status
    }

    /// `mirror status --json`.
    public var json: JSONObject {
        guard exists else {
            return ["store": .string(store), "online": false, "running": .bool(running), "server": .null, "lastSeq": 0,
                    "outbox": 0, "failed": 0, "conflicts": 0, "lastError": .null, "patterns": .array([]), "client": .null,
                    "resync": .null, "exists": false]
        }
        var body: JSONObject = [
            "store": .string(store), "online": .bool(online), "running": .bool(running),
            "server": server.map(JSONValue.string) ?? .null, "lastSeq": .int(lastSeq),
            "outbox": .int(outbox), "failed": .int(Int64(failed)), "conflicts": .int(Int64(conflicts)),
            "lastError": lastError.map(JSONValue.string) ?? .null, "patterns": .array(patterns.map(JSONValue.string)),
            "client": client.map(JSONValue.string) ?? .null,
            "resync": resync.map { .object($0.json) } ?? .null,
        ]
        body["refused"] = .array(refused.map { entry in
            .object(["id": .int(entry.id), "name": .string(entry.name), "op": .string(entry.op["op"]?.stringValue ?? "write"),
                     "error": entry.lastError.map(JSONValue.string) ?? .null])
        })
        if let lastErrorAt { body["lastErrorAt"] = .int(lastErrorAt) }
        if let connectedTo { body["connectedTo"] = .string(connectedTo) }
        return body
    }
}
