@preconcurrency import Glibc
import TallyClient
import TallyCommandLine

/// The CLI's `--server`/`$TALLY_SERVER`/`$TALLY_URL`, `--token`/`$TALLY_TOKEN`
/// and `--insecure`, read into the library's `HubAccess`.
extension HubAccess {
    static let options = OptionTable(column: 17, [
        Option("server", "URLS", "the hub's URL, or several hubs of one cluster,",
               "comma-separated, in the order to try them: a client",
               "moves to the next when one cannot be reached",
               "(default $TALLY_SERVER, a list too, else $TALLY_URL,",
               "else ws://127.0.0.1:8080)"),
        Option("token", "T", "bearer token (default $TALLY_TOKEN); never sent in plain",
               "text to a host that is not loopback unless --insecure"),
        Option("insecure", nil, "allow sending the token over ws:// or http:// anyway"),
    ])

    /// The flags and environment variables, checked: a list with an empty
    /// element or one that is not a URL is a usage error naming it.
    init(_ arguments: Arguments) throws(UsageError) {
        var token = arguments.string("token") ?? environment("TALLY_TOKEN")
        if token?.isEmpty == true { token = nil }
        var servers: [String] = []
        var defaults = [HubAccess.localHub]
        if let list = arguments.string("server") {
            servers = try Self.list(list, from: "--server")
        } else if let list = environment("TALLY_SERVER"), !list.isEmpty {
            defaults = try Self.list(list, from: "TALLY_SERVER")
        } else if let url = environment("TALLY_URL"), !url.isEmpty {
            defaults = try Self.list(url, from: "TALLY_URL")
        }
        self.init(servers: servers, token: token, insecure: arguments.flag("insecure"), defaultURLs: defaults)
    }

    /// A list of hubs from `source` (a flag or a variable), checked.
    private static func list(_ text: String, from source: String) throws(UsageError) -> [String] {
        do { return try HubAccess.parseList(text) } catch {
            throw UsageError(message: "\(source): \(error)")
        }
    }
}

/// An environment variable, nil when unset.
func environment(_ name: String) -> String? {
    getenv(name).map { String(cString: $0) }
}
