import TallyClient
import TallyProtocol

/// One way a mirror and the hub disagree about a record or list.
public struct MirrorDifference: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case onlyOnHub = "only on the hub"
        case onlyInMirror = "only in the mirror"
        case dataDiffers = "data differs"
        case versionDiffers = "version differs"
    }

    public var name: String
    public var isList: Bool
    public var kind: Kind
    /// For data differences: the top-level members that differ.
    public var fields: [String]
    public var mirrorVersion: Int64?
    public var hubVersion: Int64?

    public var description: String {
        let what = isList ? "list \(name)" : name
        switch kind {
        case .onlyOnHub: return "\(what): only on the hub (version \(hubVersion ?? 0))"
        case .onlyInMirror: return "\(what): only in the mirror"
        case .dataDiffers:
            return "\(what): differs in \(fields.joined(separator: ", ")) (mirror based on version \(mirrorVersion ?? 0), hub at \(hubVersion ?? 0))"
        case .versionDiffers:
            return "\(what): same data, but the mirror's copy is version \(mirrorVersion ?? 0) and the hub's \(hubVersion ?? 0)"
        }
    }
}

/// Compares what a mirror shows with what the hub holds. Pure.
public enum MirrorComparison {
    public static func records(mirror: [MirrorRecord], hub: [RecordEnvelope]) -> [MirrorDifference] {
        var differences: [MirrorDifference] = []
        var local: [String: MirrorRecord] = [:]
        for record in mirror where record.data != nil { local[record.name] = record }
        var remote: [String: RecordEnvelope] = [:]
        for record in hub { remote[record.name] = record }
        for name in Set(local.keys).union(remote.keys).sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            switch (local[name], remote[name]) {
            case (nil, let theirs?):
                differences.append(MirrorDifference(name: name, isList: false, kind: .onlyOnHub, fields: [],
                                                    mirrorVersion: nil, hubVersion: theirs.version))
            case (let ours?, nil):
                differences.append(MirrorDifference(name: name, isList: false, kind: .onlyInMirror, fields: [],
                                                    mirrorVersion: ours.version, hubVersion: nil))
            case (let ours?, let theirs?):
                let data = ours.data ?? [:]
                if data != theirs.data {
                    let fields = ObservedRecords.changedKeys(data, theirs.data).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
                    differences.append(MirrorDifference(name: name, isList: false, kind: .dataDiffers, fields: fields,
                                                        mirrorVersion: ours.version, hubVersion: theirs.version))
                } else if ours.version != theirs.version {
                    differences.append(MirrorDifference(name: name, isList: false, kind: .versionDiffers, fields: [],
                                                        mirrorVersion: ours.version, hubVersion: theirs.version))
                }
            case (nil, nil):
                break
            }
        }
        return differences
    }

    public static func list(name: String, mirror: MirrorList?, hub: ListEnvelope?) -> MirrorDifference? {
        switch (mirror, hub) {
        case (nil, nil): return nil
        case (nil, let theirs?):
            return MirrorDifference(name: name, isList: true, kind: .onlyOnHub, fields: [], mirrorVersion: nil, hubVersion: theirs.version)
        case (let ours?, nil):
            return MirrorDifference(name: name, isList: true, kind: .onlyInMirror, fields: [], mirrorVersion: ours.version, hubVersion: nil)
        case (let ours?, let theirs?):
            if ours.entries != theirs.entries {
                return MirrorDifference(name: name, isList: true, kind: .dataDiffers, fields: ["entries"],
                                        mirrorVersion: ours.version, hubVersion: theirs.version)
            }
            if ours.version != theirs.version {
                return MirrorDifference(name: name, isList: true, kind: .versionDiffers, fields: [],
                                        mirrorVersion: ours.version, hubVersion: theirs.version)
            }
            return nil
        }
    }

    /// What `tally verify` finds: every difference between the store and
    /// the hub under the patterns of the store's last run, how many
    /// patterns that is, and the writes still waiting in the outbox.
    public static func compare(_ store: MirrorStore, with client: BlockingTallyClient) throws
        -> (differences: [MirrorDifference], patterns: Int, outbox: Int64) {
        let patterns = (try store.meta("patterns")).flatMap { try? JSONValue.parse($0) }?.arrayValue?.compactMap(\.stringValue) ?? []
        let scope = scope(patterns: patterns, catalog: try store.workflows())
        var differences: [MirrorDifference] = []
        for prefix in scope.prefixes {
            var hub: [RecordEnvelope] = []
            try client.forEachPage(["op": "get", "prefix": .string(prefix)]) { page in
                hub += page.compactMap(RecordEnvelope.init(json:))
            }
            differences += records(mirror: try store.records(prefix: prefix), hub: hub)
        }
        for name in scope.records {
            let hub = try absentIfNotFound { () throws(HubError) in try client.request(["op": "get", "name": .string(name)]) }
                .flatMap(RecordEnvelope.init(json:)).map { [$0] } ?? []
            differences += records(mirror: try store.record(name).map { [$0] } ?? [], hub: hub)
        }
        for name in scope.lists {
            let hub = try absentIfNotFound { () throws(HubError) in try client.wholeList(name) }.flatMap(ListEnvelope.init(json:))
            if let difference = list(name: name, mirror: try store.list(name), hub: hub) {
                differences.append(difference)
            }
        }
        return (differences, scope.prefixes.count + scope.records.count, try store.outboxDepth())
    }

    /// The hub's answer; nil when it has no such record or list.
    private static func absentIfNotFound(_ get: () throws(HubError) -> JSONObject) throws(HubError) -> JSONObject? {
        do { return try get() } catch where error.code == "not_found" { return nil }
    }

    /// The prefixes and names a run's patterns cover (for verify).
    public static func scope(patterns: [String], catalog: WorkflowCatalog) -> (prefixes: [String], records: [String], lists: [String]) {
        var prefixes: [String] = []
        var records: [String] = []
        var lists: [String] = []
        for pattern in patterns {
            for target in MirrorTarget.targets(forPattern: pattern, catalog: catalog) {
                switch target {
                case .prefix(let prefix): if !prefixes.contains(prefix) { prefixes.append(prefix) }
                case .record(let name): if !records.contains(name) { records.append(name) }
                case .list(let name): if !lists.contains(name) { lists.append(name) }
                default: break
                }
            }
        }
        return (prefixes, records, lists)
    }
}
