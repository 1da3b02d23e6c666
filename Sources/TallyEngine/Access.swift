import TallyProtocol

/// What a role may do to a name (PROTOCOL.md, "Roles and rules").
public enum Permission: String, Sendable, CaseIterable, Hashable {
    /// get
    case read
    /// change an existing record or list
    case write
    /// a write that brings a record or list into being
    case create
    case delete
    case subscribe
    /// events; the pattern is matched against the topic
    case publish
}

/// A name pattern: `*` matches any run of characters except `/`, `**`
/// matches anything, including `/`; every other character matches itself.
public struct NamePattern: Sendable, Equatable, CustomStringConvertible {
    public let text: String
    private let bytes: [UInt8]
    /// `**`: every name, checked on every write of an admin or staff
    /// connection, so it skips the matching (and the name's bytes copy).
    private let matchesEverything: Bool

    public init(_ text: String) {
        self.text = text
        self.bytes = Array(text.utf8)
        self.matchesEverything = text == "**"
    }

    public var description: String { text }

    public func matches(_ name: String) -> Bool {
        matchesEverything || Self.match(bytes[...], Array(name.utf8)[...])
    }

    /// Whether every name that starts with `prefix` matches: the pattern is
    /// some head followed by `**`, and the head matches a leading part of
    /// the prefix.
    public func covers(prefix: String) -> Bool {
        guard bytes.count >= 2, bytes.suffix(2).elementsEqual("**".utf8) else { return false }
        let head = bytes.dropLast(2)
        let name = Array(prefix.utf8)
        return (0...name.count).contains { Self.match(head, name[..<$0]) }
    }

    /// Whether some name under `prefix` may match: the pattern's literal
    /// head (up to its first `*`) and the prefix agree as far as both go.
    public func reaches(under prefix: String) -> Bool {
        let head = bytes.prefix { $0 != UInt8(ascii: "*") }
        let name = Array(prefix.utf8)
        return head.starts(with: name) || name.starts(with: head)
    }

    /// Glob matching with backtracking over `*`/`**`; patterns are short.
    private static func match(_ pattern: ArraySlice<UInt8>, _ name: ArraySlice<UInt8>) -> Bool {
        guard let first = pattern.first else { return name.isEmpty }
        if first == UInt8(ascii: "*") {
            let double = pattern.dropFirst().first == UInt8(ascii: "*")
            let rest = pattern.dropFirst(double ? 2 : 1)
            var index = name.startIndex
            while true {
                if match(rest, name[index...]) { return true }
                guard index < name.endIndex, double || name[index] != UInt8(ascii: "/") else { return false }
                index += 1
            }
        }
        guard let head = name.first, head == first else { return false }
        return match(pattern.dropFirst(), name.dropFirst())
    }
}

/// One grant: these operations on names matching the pattern, optionally only
/// on records the actor owns (`owner` == the actor's user name).
public struct AccessRule: Sendable, Equatable {
    public var names: NamePattern
    public var allow: Set<Permission>
    public var own: Bool

    public init(_ names: String, _ allow: Set<Permission>, own: Bool = false) {
        self.names = NamePattern(names)
        self.allow = allow
        self.own = own
    }
}

/// Who is asking: the user's name (stamped into history as the actor) and role.
public struct Actor: Sendable, Equatable {
    public var user: String
    public var role: String

    public init(user: String, role: String) {
        self.user = user
        self.role = role
    }
}

/// The roles and their rules. Anything no rule allows is denied.
public struct AccessPolicy: Sendable {
    public var roles: [String: [AccessRule]]

    public init(roles: [String: [AccessRule]] = AccessPolicy.defaultRoles) { self.roles = roles }

    static let everything = Set(Permission.allCases)

    /// The roles that ship (the config may redefine them or add others).
    /// Staff may delete, but deleting a workflow record needs a role the
    /// workflow names (admin by default).
    public static let defaultRoles: [String: [AccessRule]] = [
        "admin": [AccessRule("**", everything)],
        "staff": [AccessRule("**", everything)],
        "dashboard": [AccessRule("**", [.read, .subscribe])],
        "client": [
            AccessRule("orders/*", [.create]),
            AccessRule("orders/*", [.read, .subscribe], own: true),
            AccessRule("items/**", [.read, .subscribe]),
        ],
    ]

    /// What a check on one name found.
    public enum Decision: Sendable, Equatable {
        case allowed
        /// Allowed only if the record's owner is the actor.
        case ifOwner
        case denied
    }

    public func decide(_ actor: Actor, _ permission: Permission, name: String) -> Decision {
        var result = Decision.denied
        for rule in roles[actor.role] ?? [] where rule.allow.contains(permission) && rule.names.matches(name) {
            if !rule.own { return .allowed }
            result = .ifOwner
        }
        return result
    }

    /// Like `decide`, for every name under `prefix` at once.
    public func decide(_ actor: Actor, _ permission: Permission, prefix: String) -> Decision {
        var result = Decision.denied
        for rule in roles[actor.role] ?? [] where rule.allow.contains(permission) && rule.names.covers(prefix: prefix) {
            if !rule.own { return .allowed }
            result = .ifOwner
        }
        return result
    }

    /// For a live query over `prefix` (PROTOCOL.md, "Live queries"): like
    /// `decide(_:_:prefix:)`, but a rule with `own` that reaches some names
    /// under the prefix (`orders/*` for `orders/`) allows a query of one's
    /// own records.
    public func decide(_ actor: Actor, _ permission: Permission, query prefix: String) -> Decision {
        let decision = decide(actor, permission, prefix: prefix)
        guard decision == .denied else { return decision }
        for rule in roles[actor.role] ?? [] where rule.own && rule.allow.contains(permission) && rule.names.reaches(under: prefix) {
            return .ifOwner
        }
        return .denied
    }

    /// Checks one record (or list, topic, blob) name; `owner` is the record's
    /// owner when it exists.
    public func check(_ actor: Actor, _ permission: Permission, name: String, owner: @autoclosure () -> String?) throws(ProtocolError) {
        switch decide(actor, permission, name: name) {
        case .allowed: return
        case .ifOwner where owner() == actor.user: return
        case .ifOwner, .denied: throw Self.denied(actor, permission, name: name, ownOnly: decide(actor, permission, name: name) == .ifOwner)
        }
    }

    public static func denied(_ actor: Actor, _ permission: Permission, name: String, ownOnly: Bool = false) -> ProtocolError {
        let hint = ownOnly ? " (only records it owns)" : ""
        return ProtocolError(.forbidden, "role \"\(actor.role)\" may not \(permission.rawValue) \"\(name)\"\(hint)",
                             details: ["role": .string(actor.role), "operation": .string(permission.rawValue),
                                       "name": .string(name)])
    }
}
