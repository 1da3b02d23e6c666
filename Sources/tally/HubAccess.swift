@preconcurrency import Glibc
import TallyClient

/// The CLI's `--server`/`$TALLY_URL`, `--token`/`$TALLY_TOKEN` and
/// `--insecure`, read into the library's `HubAccess`.
extension HubAccess {
    static let valuedOptions: Set<String> = ["server", "token"]
    static let flagOptions: Set<String> = ["insecure"]
    static let help = """
      --server URL   the hub (default $TALLY_URL, else ws://127.0.0.1:8080)
      --token T      bearer token (default $TALLY_TOKEN); never sent in plain
                     text to a host that is not loopback unless --insecure
      --insecure     allow sending the token over ws:// or http:// anyway
    """

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
