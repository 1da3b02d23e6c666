import TallyClient

/// A command line usage mistake: printed with a hint, exit status 2.
struct UsageError: Error {
    var message: String
}

/// Parses `--flag value`, `--flag=value`, `--switch` and positionals against
/// the options a command declares (its `OptionTable`s, and `--help`);
/// anything else is a usage error.
struct Arguments {
    private(set) var positionals: [String] = []
    private var values: [String: [String]] = [:]
    private var switches: Set<String> = []

    init(_ args: ArraySlice<String>, command: String, options tables: OptionTable...) throws(UsageError) {
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

    func flag(_ name: String) -> Bool { switches.contains(name) }

    func string(_ name: String) -> String? { values[name]?.last }

    /// Every value of an option that may be repeated (`--policy A --policy B`).
    func strings(_ name: String) -> [String] { values[name] ?? [] }

    func int(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError(message: "--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return value
    }

    /// A duration in seconds (decimals allowed), returned in milliseconds.
    func millis(_ name: String) throws(UsageError) -> Int64? {
        guard let text = string(name) else { return nil }
        guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
            throw UsageError(message: "--\(name) must be a number of seconds greater than 0, not '\(text)'")
        }
        return Int64(seconds * 1000)
    }

    /// A byte size: a number with an optional K, M or G suffix (binary units).
    func bytes(_ name: String) throws(UsageError) -> Int? {
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

    /// A file of the user's data: `--OPTION FILE`, else where
    /// `UserDataFile` places it (`$VARIABLE`, then the XDG data directory).
    static func dataFile(_ flag: String?, option: String, variable: String, name: String,
                         what: String) throws(UsageError) -> String {
        if let flag {
            guard !flag.isEmpty else { throw UsageError(message: "--\(option) needs a file name") }
            return flag
        }
        guard let path = UserDataFile.path(name, variable: variable) else {
            throw UsageError(message: "cannot place \(what): HOME is not set; use --\(option) FILE or \(variable)")
        }
        return path
    }

    func noPositionals(_ command: String) throws(UsageError) {
        if let extra = positionals.first {
            throw UsageError(message: "unexpected argument '\(extra)' for 'tally \(command)'")
        }
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
