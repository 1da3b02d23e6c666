/// A command line usage mistake: printed with a hint, exit status 2.
public struct UsageError: Error, CustomStringConvertible, Sendable {
    public var message: String

    public init(message: String) { self.message = message }

    public var description: String { message }
}

/// Parses `--flag value`, `--flag=value`, `--switch` and positionals against
/// the options a command declares (its `OptionTable`s, and `--help`);
/// anything else is a usage error.
public struct Arguments: Sendable {
    public private(set) var positionals: [String] = []
    private var values: [String: [String]] = [:]
    private var switches: Set<String> = []

    public init(_ args: ArraySlice<String>, command: String, options tables: OptionTable...) throws(UsageError) {
        let valued = tables.reduce(into: Set<String>()) { $0.formUnion($1.valued) }
        let flags = tables.reduce(into: Set(["help"])) { $0.formUnion($1.flags) }
        let strict = tables.reduce(into: Set<String>()) { $0.formUnion($1.strict) }
        var iterator = args.makeIterator()
        var onlyPositionals = false
        while let arg = iterator.next() {
            if onlyPositionals || !arg.hasPrefix("--") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            var name = String(arg.dropFirst(2))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if flags.contains(name) {
                guard inline == nil else { throw UsageError(message: "--\(name) takes no value") }
                switches.insert(name)
            } else if strict.contains(name), inline == nil {
                guard let value = iterator.next(), !value.hasPrefix("--") else {
                    throw UsageError(message: "--\(name) needs a value (for a file whose name starts with '--', write ./--name)")
                }
                values[name, default: []].append(value)
            } else if valued.contains(name) {
                guard let value = inline ?? iterator.next() else {
                    throw UsageError(message: "--\(name) needs a value")
                }
                values[name, default: []].append(value)
            } else {
                throw UsageError(message: "unknown option --\(name) for 'tally \(command)'")
            }
        }
    }

    public func flag(_ name: String) -> Bool { switches.contains(name) }

    public func string(_ name: String) -> String? { values[name]?.last }

    /// Every value of an option that may be repeated (`--policy A --policy B`).
    public func strings(_ name: String) -> [String] { values[name] ?? [] }

    public func int(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError(message: "--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return value
    }

    /// A duration in seconds (decimals allowed), returned in milliseconds.
    public func millis(_ name: String) throws(UsageError) -> Int64? {
        guard let text = string(name) else { return nil }
        guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
            throw UsageError(message: "--\(name) must be a number of seconds greater than 0, not '\(text)'")
        }
        return Int64(seconds * 1000)
    }

    /// A byte size: a number with an optional K, M or G suffix (binary units).
    public func bytes(_ name: String) throws(UsageError) -> Int? {
        guard let text = string(name) else { return nil }
        var digits = Substring(text)
        var scale = 1
        switch digits.last?.uppercased() {
        case "K": scale = 1 << 10; digits.removeLast()
        case "M": scale = 1 << 20; digits.removeLast()
        case "G": scale = 1 << 30; digits.removeLast()
        default: break
        }
        guard let value = Int(digits), value > 0, value <= (1 << 40) / scale else {
            throw UsageError(message: "--\(name) must be a size like 65536, 64K or 16M, not '\(text)'")
        }
        return value * scale
    }

    public func noPositionals(_ command: String) throws(UsageError) {
        if let extra = positionals.first {
            throw UsageError(message: "unexpected argument '\(extra)' for 'tally \(command)'")
        }
    }
}
