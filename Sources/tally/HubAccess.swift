@preconcurrency import Glibc
import TallyClient
import TallyCommandLine

/// The CLI's `--server`/`$TALLY_URL`, `--token`/`$TALLY_TOKEN` and
/// `--insecure`, read into the library's `HubAccess`.
extension HubAccess {
    static let options = OptionTable(column: 17, [
        Option("server", "URL", "the hub (default $TALLY_URL, else ws://127.0.0.1:8080)"),
        Option("token", "T", "bearer token (default $TALLY_TOKEN); never sent in plain",
               "text to a host that is not loopback unless --insecure"),
        Option("insecure", nil, "allow sending the token over ws:// or http:// anyway"),
    ])

    init(_ arguments: Arguments) {
        var token = arguments.string("token") ?? environment("TALLY_TOKEN")
        if token?.isEmpty == true { token = nil }
        self.init(server: arguments.string("server"), token: token, insecure: arguments.flag("insecure"),
                  defaultURL: environment("TALLY_URL") ?? "ws://127.0.0.1:8080")
    }
}

/// An environment variable, nil when unset.
func environment(_ name: String) -> String? {
    getenv(name).map { String(cString: $0) }
}
