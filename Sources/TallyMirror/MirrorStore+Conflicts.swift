import TallyClient
import TallyProtocol
import TallySQLite

/// Closing recorded conflicts: here (`tally mirror conflicts resolve`) or
/// because the hub's `conflicts/<id>` record says someone resolved it there.
extension MirrorStore {
    /// Resolves a recorded conflict by choosing a side: `local` writes the
    /// mirror's value (through the outbox), `hub` keeps the hub's; either
    /// way the `conflicts/<id>` record on the hub is marked resolved.
    public func resolveConflict(_ id: String, take: MergePolicy, mirror: String) throws(MirrorError) -> ConflictRecord {
        guard take == .hub || take == .client else {
            throw .refused(ProtocolError.badField("take", "take local or hub"))
        }
        do {
            return try transaction { () throws(MirrorStoreError) -> Result<ConflictRecord, ProtocolError> in
                guard var conflict = try self.conflict(id) else {
                    return .failure(ProtocolError(.notFound, "no conflict \(id) in this mirror; 'tally mirror conflicts' lists them"))
                }
                let side = Self.side(take)
                if let resolved = conflict.resolved {
                    if resolved == side { return .success(conflict) }
                    return .failure(ProtocolError(.conflict, "conflict \(id) was already resolved by taking \(resolved)"))
                }
                if take == .client { try queueLocalValue(of: conflict) }
                conflict.resolved = side
                try db.query("UPDATE conflicts SET resolved = ? WHERE id = ?", [.text(side), .text(id)])
                let record = "conflicts/\(id)"
                try insertEntry(name: record, op: ["op": "set", "name": .string(record), "data": .object(conflict.hubRecord(mirror: mirror))],
                                idem: "mirror-\(Self.randomKey())", baseVersion: -1, base: nil)
                return .success(conflict)
            }.get()
        } catch {
            throw MirrorError(error)
        }
    }

    /// Closes a conflict the hub says was resolved elsewhere (see
    /// `HubResolution`). Taking the local side writes the mirror's value
    /// through the outbox unless the hub already holds it; the hub's
    /// `conflicts/<id>` record is left as the resolver wrote it.
    /// - Returns: the closed conflict, or nil when it was not open any more
    ///   (resolved here first: the first resolution seen wins).
    public func adoptResolution(_ id: String, take: MergePolicy, hubHoldsLocal: Bool) throws(MirrorStoreError) -> ConflictRecord? {
        try transaction { () throws(MirrorStoreError) -> ConflictRecord? in
            guard var conflict = try self.conflict(id), conflict.resolved == nil, take == .client || take == .hub else { return nil }
            if take == .client, !hubHoldsLocal { try queueLocalValue(of: conflict) }
            conflict.resolved = Self.side(take)
            try db.query("UPDATE conflicts SET resolved = ? WHERE id = ?", [.text(Self.side(take)), .text(id)])
            return conflict
        }
    }

    static func side(_ take: MergePolicy) -> String { take == .client ? "local" : "hub" }

    /// Queues the write that puts the conflict's local value on the hub and
    /// shows it in the local copy at once (part of the caller's transaction).
    private func queueLocalValue(of conflict: ConflictRecord) throws(MirrorStoreError) {
        let rule = try workflows().rule(for: conflict.name)
        let row = try record(conflict.name)
        let write: JSONObject
        if conflict.field == "*" {
            if case .object(let data)? = conflict.local {
                var data = data
                if let rule { for field in rule.protectedFields { data[field] = nil } }
                write = ["op": "set", "name": .string(conflict.name), "data": .object(data)]
            } else {
                write = ["op": "delete", "name": .string(conflict.name)]
            }
        } else if let local = conflict.local {
            write = ["op": "set", "name": .string(conflict.name), "path": .string(conflict.field), "value": local]
        } else {
            write = ["op": "delete", "name": .string(conflict.name), "path": .string(conflict.field)]
        }
        try insertEntry(name: conflict.name, op: write, idem: "mirror-\(Self.randomKey())",
                        baseVersion: row?.version ?? 0, base: row?.data)
        let view = LocalEffect.apply(write, to: row?.data, rule: rule)
        try putRecord(MirrorRecord(name: conflict.name, version: row?.version ?? 0, seq: row?.seq ?? 0,
                                   data: view, base: row?.base, updated: Self.now()))
    }
}
