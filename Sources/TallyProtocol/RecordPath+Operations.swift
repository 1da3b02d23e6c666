/// Reading and writing a record at a path. All pure: each returns a new value
/// (or throws) and leaves `self` alone, so the engine can validate a write
/// before committing it.
///
/// A record's root is a JSON object, so the writing operations require an
/// object root and a path that starts with a key. Reading accepts any root.
extension JSONValue {
    /// The value at `path`, or nil when a key is missing, an index is out of
    /// range, or the path goes through a value that cannot hold the segment.
    public func value(at path: RecordPath) -> JSONValue? {
        var current = self
        for segment in path.segments {
            switch (segment, current) {
            case (.key(let key), .object(let object)):
                guard let child = object[key] else { return nil }
                current = child
            case (.index(let index), .array(let array)):
                guard index < array.count else { return nil }
                current = array[index]
            case (.key, _), (.index, _):
                return nil
            }
        }
        return current
    }

    /// A copy with `newValue` at `path`.
    ///
    /// Missing objects on the way are created for key segments (as deepstream's
    /// record set-path does), so `a.b.c` on `{}` gives `{"a":{"b":{"c":…}}}`.
    /// An index segment needs an existing array: an index below the count
    /// replaces, an index equal to the count appends, a larger one throws
    /// (an array with holes has no JSON form).
    public func setting(_ newValue: JSONValue, at path: RecordPath) throws(RecordPathError) -> JSONValue {
        try checkRecordRoot(for: path, verb: "set")
        return try Self.set(newValue, in: self, path: path, depth: 0, verb: "set")
    }

    /// A copy without the member or element at `path`; later array elements
    /// shift down. A path that is absent, or that goes through a scalar,
    /// removes nothing and returns the value unchanged: the result the client
    /// asked for (nothing there) already holds.
    public func removing(at path: RecordPath) throws(RecordPathError) -> JSONValue {
        try checkRecordRoot(for: path, verb: "remove")
        return Self.remove(in: self, path: path, depth: 0) ?? self
    }

    /// A copy with the number at `path` increased by `amount`; an absent value
    /// becomes `amount` (created as `setting` would).
    ///
    /// Two integers add exactly as Int64; if that overflows, or either side is
    /// a Double, the sum is a Double. `2.0` counts as a Double here: the kind
    /// a client wrote is kept, as serialization keeps it.
    public func incrementing(at path: RecordPath, by amount: JSONNumber) throws(RecordPathError) -> JSONValue {
        try checkRecordRoot(for: path, verb: "increment")
        let result: JSONNumber
        switch value(at: path) {
        case nil:
            result = amount
        case .number(let current)?:
            guard let sum = Self.sum(current, amount) else {
                throw RecordPathError(kind: .sumOutOfRange, offset: nil,
                                      message: "cannot increment \(path): \(current) + \(amount) is beyond the range of a JSON number")
            }
            result = sum
        case let other?:
            throw RecordPathError(kind: .notANumber, offset: nil,
                                  message: "cannot increment \(path): it holds \(other.kindName)")
        }
        return try Self.set(.number(result), in: self, path: path, depth: 0, verb: "increment")
    }

    // MARK: Helpers

    /// "null", "a boolean", "a number", …, for messages.
    var kindName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    private func checkRecordRoot(for path: RecordPath, verb: String) throws(RecordPathError) {
        guard case .object = self else {
            throw RecordPathError(kind: .rootNotObject, offset: nil,
                                  message: "cannot \(verb) \(path): the record is \(kindName), but records are JSON objects")
        }
        if case .index = path.segments[0] {
            throw RecordPathError(kind: .indexAtRoot, offset: nil,
                                  message: "cannot \(verb) \(path): a record is an object, so the path must start with a key")
        }
    }

    /// `current` is nil where nothing exists yet.
    private static func set(
        _ newValue: JSONValue, in current: JSONValue?, path: RecordPath, depth: Int, verb: String
    ) throws(RecordPathError) -> JSONValue {
        guard depth < path.segments.count else { return newValue }
        switch path.segments[depth] {
        case .key(let key):
            var object: JSONObject
            switch current {
            case nil: object = JSONObject()
            case .object(let existing)?: object = existing
            case let other?:
                throw RecordPathError(kind: .notAContainer, offset: nil,
                                      message: "cannot \(verb) \(path): \(path.prefix(depth)) holds \(other.kindName), not an object")
            }
            object[key] = try set(newValue, in: object[key], path: path, depth: depth + 1, verb: verb)
            return .object(object)
        case .index(let index):
            let container = path.prefix(depth)
            guard case .array(var array)? = current else {
                let found = current.map { "holds \($0.kindName), not an array" } ?? "does not exist"
                throw RecordPathError(kind: .notAContainer, offset: nil,
                                      message: "cannot \(verb) \(path): \(container) \(found); an index needs an existing array")
            }
            if index < array.count {
                array[index] = try set(newValue, in: array[index], path: path, depth: depth + 1, verb: verb)
            } else if index == array.count {
                array.append(try set(newValue, in: nil, path: path, depth: depth + 1, verb: verb))
            } else {
                let elements = array.count == 1 ? "1 element" : "\(array.count) elements"
                throw RecordPathError(kind: .indexPastEnd, offset: nil,
                                      message: "cannot \(verb) \(path): index \(index) is past the end of \(container) (\(elements)); use \(array.count) to append")
            }
            return .array(array)
        }
    }

    /// The container with the path removed, or nil when nothing was there.
    private static func remove(in current: JSONValue, path: RecordPath, depth: Int) -> JSONValue? {
        let isLast = depth == path.segments.count - 1
        switch (path.segments[depth], current) {
        case (.key(let key), .object(var object)):
            guard let child = object[key] else { return nil }
            if isLast {
                object[key] = nil
            } else {
                guard let newChild = remove(in: child, path: path, depth: depth + 1) else { return nil }
                object[key] = newChild
            }
            return .object(object)
        case (.index(let index), .array(var array)):
            guard index < array.count else { return nil }
            if isLast {
                array.remove(at: index)
            } else {
                guard let newChild = remove(in: array[index], path: path, depth: depth + 1) else { return nil }
                array[index] = newChild
            }
            return .array(array)
        case (.key, _), (.index, _):
            return nil
        }
    }

    /// Exact Int64 sum when both are integers and it fits, else a Double sum;
    /// nil when the Double sum is not finite.
    private static func sum(_ a: JSONNumber, _ b: JSONNumber) -> JSONNumber? {
        if case .int(let x) = a.storage, case .int(let y) = b.storage {
            let (exact, overflow) = x.addingReportingOverflow(y)
            if !overflow { return JSONNumber(exact) }
        }
        return JSONNumber(a.doubleValue + b.doubleValue)
    }
}
