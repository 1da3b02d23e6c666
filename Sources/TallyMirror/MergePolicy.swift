/// Who wins a field both the mirror and the hub changed since the mirror's
/// copy (stage fields excepted: they follow the workflow).
public enum MergePolicy: String, Sendable, Equatable, CaseIterable {
    /// The hub's value stays (the default).
    case hub
    /// The mirror's value is written over the hub's.
    case client
    /// The hub's value stays and the disagreement is recorded as a
    /// conflict, locally and as a `conflicts/<id>` record on the hub.
    case both
}

/// The policy of each name prefix; the longest matching prefix decides.
public struct PolicyTable: Sendable, Equatable {
    public var policies: [String: MergePolicy]
    public var fallback: MergePolicy

    public init(_ policies: [String: MergePolicy] = [:], fallback: MergePolicy = .hub) {
        self.policies = policies
        self.fallback = fallback
    }

    public func policy(for name: String) -> MergePolicy {
        var best: (length: Int, policy: MergePolicy)?
        for (prefix, policy) in policies where name.hasPrefix(prefix) {
            let length = prefix.utf8.count
            if best == nil || length > best!.length { best = (length, policy) }
        }
        return best?.policy ?? fallback
    }

    /// Parses `PREFIX=hub|client|both`.
    public static func parse(_ text: String) -> (String, MergePolicy)? {
        guard let equals = text.lastIndex(of: "=") else { return nil }
        guard let policy = MergePolicy(rawValue: String(text[text.index(after: equals)...])) else { return nil }
        return (String(text[..<equals]), policy)
    }
}
