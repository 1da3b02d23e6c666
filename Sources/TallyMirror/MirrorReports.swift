import TallyClient
import TallyProtocol

/// What the mirror commands print, built beside the types they show (the
/// CLI prints them; nothing here writes).

extension MirrorStatus {
    /// `mirror status` for people: the state, then a line per figure.
    public var lines: [String] {
        guard exists else {
            // A 'mirror run' that is just starting has not created it yet.
            return ["mirror \(store): offline (no mirror store yet\(running ? "; mirror run is starting" : ""))"]
        }
        let state = online ? "online" : running ? "offline (mirror run is reconnecting)" : "offline (no mirror run on this store)"
        var lines = ["mirror \(store): \(state)",
                     "  hub          \(server ?? "(never run)")\(connectedTo.map { " (connected to \($0))" } ?? "")",
                     "  patterns     \(patterns.isEmpty ? "(none)" : patterns.joined(separator: " "))",
                     "  last seq     \(lastSeq)",
                     "  outbox       \(outbox) write\(outbox == 1 ? "" : "s") waiting"]
        if failed > 0 {
            lines.append("  refused      \(failed) write\(failed == 1 ? "" : "s") the hub refused (kept in the outbox as failed):")
            for entry in refused {
                lines.append("    #\(entry.id) \(entry.op["op"]?.stringValue ?? "write") \(entry.name): \(entry.lastError ?? "no reason recorded")")
            }
        }
        lines.append("  conflicts    \(conflicts) open\(conflicts > 0 ? " ('tally mirror conflicts' lists them)" : "")")
        lines.append("  last error   \(lastError ?? "none")")
        if let resync { lines.append("  resync       \(resync.summary)") }
        return lines
    }
}

extension ConflictRecord {
    /// `mirror conflicts`' line: id, record, field, the three values, the
    /// policy and whether it is open.
    public var line: String {
        let state = resolved.map { "resolved: took \($0)" } ?? "open"
        return "\(id)  \(name)  \(field)  local=\((local ?? .null).serializedString)  hub=\((hub ?? .null).serializedString)  base=\((base ?? .null).serializedString)  (\(policy), \(state))"
    }
}

extension LocalCopy {
    /// `mirror get`: the record's data, or the value at `path` (as the text
    /// given), and the `--json` envelope around it.
    public func envelope(at path: (parsed: RecordPath, text: String)?) throws(MirrorError) -> (json: JSONObject, value: JSONValue) {
        var envelope: JSONObject = ["name": .string(record.name), "version": .int(record.version), "seq": .int(record.seq),
                                    "pending": .bool(pending)]
        guard let path else {
            envelope["data"] = .object(data)
            return (envelope, .object(data))
        }
        let value = try value(at: path.parsed, text: path.text)
        (envelope["path"], envelope["value"]) = (.string(path.text), value)
        return (envelope, value)
    }
}

extension MirrorComparison {
    /// `verify --json`: whether mirror and hub agree, each difference, and
    /// the local writes still waiting.
    public static func json(_ differences: [MirrorDifference], outbox depth: Int64) -> JSONObject {
        ["equal": .bool(differences.isEmpty), "outbox": .int(depth),
         "differences": .array(differences.map { difference in
             .object(["name": .string(difference.name), "list": .bool(difference.isList),
                      "kind": .string(difference.kind.rawValue), "fields": .array(difference.fields.map(JSONValue.string)),
                      "mirrorVersion": difference.mirrorVersion.map { .int($0) } ?? .null,
                      "hubVersion": difference.hubVersion.map { .int($0) } ?? .null])
         })]
    }

    /// `verify`'s last line: how many differences, and the writes waiting.
    public static func summary(_ differences: [MirrorDifference], outbox depth: Int64, store: String, patterns: Int) -> String {
        guard !differences.isEmpty else {
            return "the mirror \(store) and the hub agree (\(patterns) pattern\(patterns == 1 ? "" : "s"))"
        }
        return "\(differences.count) difference\(differences.count == 1 ? "" : "s")"
            + (depth > 0 ? "; \(depth) local write\(depth == 1 ? "" : "s") still waiting in the outbox" : "")
    }
}

extension MirrorComparison {
    /// `tally verify`: opens the mirror at `path` (never creating it),
    /// connects to the first reachable hub `access` names — without one,
    /// of the hubs of the store's last run — and compares them
    /// (`compare(_:with:)`).
    public static func verify(store path: String, access: HubAccess)
        throws -> (differences: [MirrorDifference], patterns: Int, outbox: Int64) {
        let store = try MirrorStore.open(path, create: false)
        var access = access
        if access.servers.isEmpty {
            guard let hub = try store.meta("hub") else {
                throw HubError.disconnected("the mirror \(path) has never run against a hub; give --server URL")
            }
            access.servers = (try? HubAccess.parseList(hub)) ?? [hub]
        }
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        return try compare(store, with: client)
    }
}
