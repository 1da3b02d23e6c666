import Dispatch
import TallyClient
import TallyProtocol

/// Conflicts resolved on the hub: while it runs, the mirror watches the
/// `conflicts/` prefix (with a resume point of its own; the records are not
/// mirrored) and, when one of its open conflicts is marked resolved there
/// (a dashboard, REST), closes it here as `tally mirror conflicts resolve`
/// would — writing the local value only if the hub does not hold it yet.
extension MirrorSync {
    static let conflictsPrefix = "conflicts/"
    /// The watch's resume point in `cursors` (not `prefix:conflicts/`, which
    /// is the key of a pattern that mirrors the records).
    static let conflictWatchKey = "watch:conflicts/"

    func watchConflicts(since: Int64?) {
        conflictWatch = client.subscribe(.prefix(Self.conflictsPrefix), since: since) { [self] event in
            try conflictEvent(event)
        }
    }

    func conflictEvent(_ event: SubscriptionEvent) throws(MirrorStoreError) {
        guard !stopped else { throw MirrorStoreError("the mirror is stopping") }
        switch event {
        case .snapshot(let snapshot):
            let open = Set(try store.conflicts().map(\.id))
            for record in snapshot.records {
                guard let id = Self.conflictID(ofRecord: record.name), open.contains(id) else { continue }
                try resolutionSeen(id, record: record.data)
            }
        case .changes(let changes, _):
            for change in changes where !change.isList {
                guard let id = Self.conflictID(ofRecord: change.name), let conflict = try store.conflict(id),
                      conflict.resolved == nil else { continue }
                if change.kind == .set, let data = change.data {
                    try resolutionSeen(id, record: data)
                } else {
                    // A path write (a dashboard's atomic resolve): read the whole record.
                    checkResolution(id)
                }
            }
        case .failed(let error):
            configuration.log?("cannot watch \(Self.conflictsPrefix) for conflicts resolved on the hub: \(error.message) (\(error.code))")
        case .event, .queryChange:
            break
        }
    }

    static func conflictID(ofRecord name: String) -> String? {
        guard name.hasBytePrefix(conflictsPrefix) else { return nil }
        let id = String(name.dropFirst(conflictsPrefix.count))
        return id.isEmpty || id.contains("/") ? nil : id
    }

    /// The hub's `conflicts/<id>` record of an open conflict of ours.
    func resolutionSeen(_ id: String, record: JSONObject?) throws(MirrorStoreError) {
        switch HubResolution(record: record, mirror: configuration.clientID) {
        case .open:
            pendingResolutions.remove(id)
        case .ignored(let why):
            pendingResolutions.remove(id)
            configuration.log?("conflict \(id): \(why); ignored")
        case .take(let side):
            guard side == .client else {
                pendingResolutions.remove(id)
                return try adopt(id, take: .hub, hubHoldsLocal: true)
            }
            // Whether the hub already holds the local value (the resolver
            // may have written it): ask the hub, not the local copy, which
            // may not have seen that write yet.
            pendingResolutions.insert(id)
            guard let conflict = try store.conflict(id), conflict.resolved == nil else {
                pendingResolutions.remove(id)
                return
            }
            fetch(conflict.name, for: id) { [self] (hub: JSONObject?) throws(MirrorStoreError) in
                pendingResolutions.remove(id)
                try adopt(id, take: .client, hubHoldsLocal: conflict.isHeld(by: hub, rule: catalog.rule(for: conflict.name)))
            }
        }
    }

    /// Reads `conflicts/<id>` from the hub and acts on it.
    func checkResolution(_ id: String) {
        pendingResolutions.insert(id)
        fetch("\(Self.conflictsPrefix)\(id)", for: id) { [self] (record: JSONObject?) throws(MirrorStoreError) in
            try resolutionSeen(id, record: record)
        }
    }

    /// Looks at every conflict the hub may have resolved while the answer
    /// could not be had (offline, or a read that failed); at each `.live`.
    func recheckResolutions() {
        for id in pendingResolutions.sorted() where !checkingResolutions.contains(id) { checkResolution(id) }
    }

    /// `get` of a record (nil when the hub has none). A failure leaves the
    /// conflict pending: looked at again once live (a transient one) or
    /// given up with a log line (a refusal).
    private func fetch(_ name: String, for id: String,
                       then: @escaping @Sendable (JSONObject?) throws(MirrorStoreError) -> Void) {
        guard live, !stopped, checkingResolutions.insert(id).inserted else { return }
        client.sendIfLive(["op": "get", "name": .string(name)]) { [self] result in
            checkingResolutions.remove(id)
            guard !stopped else { return }
            do {
                switch result {
                case .success(let reply): try then(reply["data"]?.objectValue ?? [:])
                case .failure(let error) where error.code == .notFound: try then(nil)
                case .failure(let error) where error.isTransient:
                    if live { queue.asyncAfter(deadline: .now() + .seconds(1)) { [self] in recheckResolutions() } }
                case .failure(let error):
                    pendingResolutions.remove(id)
                    configuration.log?("conflict \(id): cannot read \(name) from the hub: \(error.message) (\(error.code))")
                }
            } catch {
                fail("cannot close conflict \(id): \(error)")
            }
        }
    }

    private func adopt(_ id: String, take: MergePolicy, hubHoldsLocal: Bool) throws(MirrorStoreError) {
        guard let conflict = try store.adoptResolution(id, take: take, hubHoldsLocal: hubHoldsLocal) else { return }
        let what = take == .hub ? "the hub's value stays"
            : hubHoldsLocal ? "the hub already holds the mirror's value" : "writing the mirror's value"
        configuration.log?("conflict \(id) (\(conflict.name) \(conflict.field)) resolved on the hub by taking \(Self.sideName(take)): \(what)")
        if take == .client, !hubHoldsLocal { pump() }
    }

    static func sideName(_ take: MergePolicy) -> String { take == .client ? "local" : "hub" }
}
