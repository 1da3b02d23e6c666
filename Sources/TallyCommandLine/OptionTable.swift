/// One option a command takes: its name, the placeholder of its value
/// (nil: a switch) and its lines in the command's help (none: the
/// command's own text describes it, as in a usage line).
public struct Option: Sendable {
    /// The names on this help line with their placeholders; two when they
    /// are described together (`--url URL --hub-pid PID`).
    public let names: [(name: String, value: String?)]
    public let help: [String]
    /// A value starting with `--` is taken for a forgotten value, not a
    /// file name (`--photo --json`).
    public private(set) var strict = false

    public init(_ name: String, _ value: String? = nil, _ help: String...) {
        names = [(name, value)]
        self.help = help
    }

    private init(names: [(name: String, value: String?)], help: [String]) {
        self.names = names
        self.help = help
    }

    /// A file option whose value may not start with `--` (write `./--name`).
    public static func file(_ name: String, _ value: String, _ help: String...) -> Option {
        var option = Option(names: [(name, value)], help: help)
        option.strict = true
        return option
    }

    /// Two options that only make sense together, on one help line.
    public static func pair(_ first: Option, _ second: Option, _ help: String...) -> Option {
        Option(names: first.names + second.names, help: help)
    }

    public var label: String {
        names.map { name, value in value.map { "--\(name) \($0)" } ?? "--\(name)" }.joined(separator: " ")
    }
}

/// A command's options in help order, declared once: the parser accepts
/// exactly these (`Arguments`), and `help` renders their lines, each
/// description starting at `column`, so `--help` lists what the command
/// takes.
public struct OptionTable: Sendable {
    public let column: Int
    public let options: [Option]

    public init(column: Int, _ options: [Option]) {
        self.column = column
        self.options = options
    }

    /// The same table with only the options named in `names` (a command
    /// that takes some of a shared table's options declares which).
    public func only(_ names: Set<String>) -> OptionTable {
        OptionTable(column: column, options.filter { option in option.names.contains { names.contains($0.name) } })
    }

    /// Every option name in the table.
    public var names: [String] { options.flatMap { $0.names.map(\.name) } }

    /// Options that take a value.
    public var valued: Set<String> { Set(options.flatMap { $0.names.filter { $0.value != nil }.map(\.name) }) }
    /// Switches.
    public var flags: Set<String> { Set(options.flatMap { $0.names.filter { $0.value == nil }.map(\.name) }) }
    /// Options whose value may not start with `--`.
    public var strict: Set<String> { Set(options.filter(\.strict).flatMap { $0.names.map(\.name) }) }

    /// The options' help lines: `  --name VALUE` padded to `column` (or two
    /// spaces past a longer label), continuation lines indented to `column`.
    public var help: String {
        options.filter { !$0.help.isEmpty }.flatMap { option -> [String] in
            let label = "  " + option.label
            let first = label + String(repeating: " ", count: max(2, column - label.count)) + option.help[0]
            return [first] + option.help.dropFirst().map { String(repeating: " ", count: column) + $0 }
        }.joined(separator: "\n")
    }
}
