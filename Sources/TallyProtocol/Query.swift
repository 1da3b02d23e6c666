/// A live query (PROTOCOL.md, "Live queries"): the records under a prefix
/// whose values at some paths are each one of a set, optionally only the
/// caller's own, optionally the first `limit` by update time.
///
/// ```json
/// {"prefix":"orders/","where":{"stage":["received","ready"]},"own":true,"order":"-updated","limit":20}
/// ```
///
/// Values compare by their JSON text as the hub serializes it (`"ready"`,
/// `2`, `true`, `null`): the same bytes the hub's indexes hold.
///
/// Equal and hashed by `key`, the canonical JSON form (conditions sorted by
/// path, values sorted and deduplicated), so two clients asking the same
/// question in a different order share one query.
public struct Query: Sendable, Hashable, CustomStringConvertible {
    public struct Condition: Sendable, Hashable {
        public var path: RecordPath
        /// Each allowed value's JSON text, sorted, distinct.
        public var values: [[UInt8]]

        public init(path: RecordPath, values: [[UInt8]]) {
            self.path = path
            self.values = values
        }
    }

    public enum Order: String, Sendable, Hashable {
        /// Oldest update first.
        case updated = "updated"
        /// Newest update first.
        case newestFirst = "-updated"
    }

    public private(set) var prefix: String
    /// At least one; all must hold.
    public private(set) var conditions: [Condition]
    /// Only records whose `owner` is the caller (`own: true`).
    public private(set) var own: Bool
    /// The user `own` stands for; set by the hub (`restricted(to:)`).
    public private(set) var owner: String?
    /// With `limit` only.
    public private(set) var order: Order?
    public private(set) var limit: Int?
    /// The canonical JSON form.
    public private(set) var key: [UInt8] = []

    public static let maxConditions = 8
    public static let maxValues = 64
    public static let maxLimit = 1000

    public init(prefix: String, conditions: [Condition], own: Bool = false, order: Order? = nil, limit: Int? = nil) {
        self.prefix = prefix
        var merged: [String: Condition] = [:]
        for condition in conditions {
            merged[condition.path.description, default: Condition(path: condition.path, values: [])].values += condition.values
        }
        self.conditions = merged.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { path in
            var condition = merged[path]!
            condition.values = Array(Set(condition.values)).sorted { $0.lexicographicallyPrecedes($1) }
            return condition
        }
        self.own = own
        self.limit = limit
        self.order = limit == nil ? nil : (order ?? .newestFirst)
        key = canonical()
    }

    /// The query with `own` resolved to `user` (the hub does this, so two
    /// users' "my orders" are two queries).
    public func restricted(to user: String) -> Query {
        guard own else { return self }
        var copy = self
        copy.owner = user
        copy.key = copy.canonical()
        return copy
    }

    public var isLimited: Bool { limit != nil }

    /// Whether a record with `data` under the prefix is in the result
    /// (the limit aside).
    public func matches(_ data: JSONObject) -> Bool {
        if own {
            guard let owner, case .string(let recordOwner)? = data["owner"], recordOwner.sameBytes(as: owner) else {
                return false
            }
        }
        let object = JSONValue.object(data)
        for condition in conditions {
            guard let value = object.value(at: condition.path) else { return false }
            let text = value.serialized()
            guard condition.values.contains(where: { $0 == text }) else { return false }
        }
        return true
    }

    /// Whether the query asks only for `user`'s records: `own`, or a
    /// condition that `owner` is exactly `user`.
    public func isRestricted(to user: String) -> Bool {
        if own { return true }
        let wanted = JSONValue.string(user).serialized()
        return conditions.contains { $0.path.description == "owner" && $0.values == [wanted] }
    }

    public var description: String { String(decoding: key, as: UTF8.self) }

    /// The query as JSON (what a client sends; `own` without its owner).
    public var json: JSONValue {
        var whereObject: JSONObject = [:]
        for condition in conditions {
            whereObject[condition.path.description] = .array(condition.values.map {
                (try? JSONValue.parse($0)) ?? .null
            })
        }
        var object: JSONObject = ["prefix": .string(prefix), "where": .object(whereObject)]
        if own { object["own"] = .bool(true) }
        if let order { object["order"] = .string(order.rawValue) }
        if let limit { object["limit"] = .number(JSONNumber(limit)) }
        return .object(object)
    }

    private func canonical() -> [UInt8] {
        guard case .object(var object) = json else { return [] }
        if let owner { object["owner"] = .string(owner) }
        return JSONValue.object(object).serialized()
    }

    public static func == (lhs: Query, rhs: Query) -> Bool { lhs.key == rhs.key }
    public func hash(into hasher: inout Hasher) { hasher.combine(key) }
}

extension Fields {
    /// `"query": {"prefix":…, "where":{PATH:[VALUE…]}, "own":…, "order":…, "limit":…}`.
    func query() throws(ProtocolError) -> Query {
        guard case .object(let object)? = object["query"] else {
            throw .badField("query", "\"query\" must be an object such as {\"prefix\":\"orders/\",\"where\":{\"stage\":[\"received\"]}}")
        }
        let fields = Fields(object)
        for key in object.keys where !["prefix", "where", "own", "order", "limit"].contains(key) {
            throw .badField("query.\(key)", "a query takes prefix, where, own, order and limit, not \"\(key)\"")
        }
        guard let prefix = try fields.string("prefix") else {
            throw .badField("query.prefix", "a query needs \"prefix\", e.g. \"orders/\"")
        }
        try Names.validatePrefix(prefix, field: "query.prefix")
        guard case .object(let whereObject)? = object["where"], !whereObject.isEmpty,
              whereObject.count <= Query.maxConditions else {
            throw .badField("query.where", "\"where\" must map 1 to \(Query.maxConditions) record paths to arrays of values, e.g. {\"stage\":[\"received\",\"ready\"]}")
        }
        var conditions: [Query.Condition] = []
        for (text, valuesValue) in whereObject {
            let field = "query.where.\(text)"
            let path: RecordPath
            do { path = try RecordPath(parsing: text) } catch { throw .path(error, field: field) }
            if case .index? = path.segments.first {
                throw .badField(field, "a path in \"where\" starts with a key, e.g. \"stage\" or \"lines[0].sku\"")
            }
            guard case .array(let values) = valuesValue, !values.isEmpty, values.count <= Query.maxValues else {
                throw .badField(field, "\"\(text)\" must be an array of 1 to \(Query.maxValues) values")
            }
            var texts: [[UInt8]] = []
            for value in values {
                switch value {
                case .string, .number, .bool, .null: texts.append(value.serialized())
                case .array, .object:
                    throw .badField(field, "the values of \"\(text)\" must be strings, numbers, booleans or null")
                }
            }
            conditions.append(Query.Condition(path: path, values: texts))
        }
        var own = false
        switch object["own"] {
        case nil: break
        case .bool(let value)?: own = value
        default: throw .badField("query.own", "\"own\" must be true or false")
        }
        let limit = try fields.int("limit", min: 1, max: Int64(Query.maxLimit)).map(Int.init)
        var order: Query.Order?
        if let text = try fields.string("order") {
            guard let parsed = Query.Order(rawValue: text) else {
                throw .badField("query.order", "\"order\" must be \"-updated\" (newest first) or \"updated\" (oldest first)")
            }
            guard limit != nil else {
                throw .badField("query.order", "\"order\" orders a limited result; add \"limit\" (1 to \(Query.maxLimit))")
            }
            order = parsed
        }
        return Query(prefix: prefix, conditions: conditions, own: own, order: order, limit: limit)
    }
}
