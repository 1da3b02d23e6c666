@preconcurrency import Glibc
import TallyClient
import TallyCommandLine

/// `tally resolve CODE`: which item a scanned code names — its id, SKU, a
/// serial, one of its codes, a UUID or an item link (`GET /v1/resolve/{code}`).
enum ResolveCommand {
    static let help = """
    Usage: tally resolve CODE [--json]

    Finds the item (items/…) whose id, SKU, serial or codes equal CODE; a link
    ending in /items/<id> or /<id> resolves by its last segment, a UUID ignores
    case. Prints the item's name, then its data. An unknown code prints the
    name a new item for it would get, and exits 1.
    \(options.help)
    \(HubAccess.options.help)
    """

    static let options = OptionTable(column: 17, [Option("json", nil, "the hub's answer as one JSON object")])

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "resolve", options: options, HubAccess.options)
        if a.flag("help") { print(help); return 0 }
        guard a.positionals.count == 1, let code = a.positionals.first else {
            throw UsageError(message: "resolve needs exactly one CODE, e.g. tally resolve 4006381333931")
        }
        guard !code.isEmpty, code.utf8.count <= 2048 else {
            throw UsageError(message: "CODE must be 1 to 2048 bytes")
        }
        let access = try IntakeCommand.checkedAccess(a)
        let resolution: CodeResolution
        do { resolution = try CodeResolution.resolve(code, access: access) } catch {
            return Failure.report(error, command: "resolve")
        }
        let json = a.flag("json")
        switch resolution {
        case .found(let name, let body):
            if json { return printJSON(body) }
            print(name)
            ClientCommands.output(body["record"]?["data"] ?? .null, pretty: true)
            return 0
        case .unknown(let suggested, let body):
            if json { printJSON(body ?? [:]) }
            printError("no item has the code '\(code)'\(suggested.map { "; a new item for it would be \($0) (tally intake new --code …)" } ?? "")")
            return 1
        case .refused(let error, let body):
            if json, let body, error != nil { printJSON(body) }
            printError(error.map(Failure.message) ?? "the hub's answer to /v1/resolve is not the expected JSON object")
            return 1
        }
    }

    @discardableResult
    private static func printJSON(_ body: JSONObject) -> Int32 {
        ClientCommands.output(.object(body))
        return 0
    }
}
