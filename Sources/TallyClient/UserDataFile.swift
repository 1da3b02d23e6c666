@preconcurrency import Glibc

/// Where a client keeps a file of the user's data (the mirror's store, the
/// intake outbox) when not told: `$VARIABLE`, else
/// `$XDG_DATA_HOME/tally/NAME`, else `~/.local/share/tally/NAME` (the XDG
/// base directory specification's default for user data). A variable set
/// to the empty string counts as unset.
public enum UserDataFile {
    /// The file's path; nil when none of `variable`, `XDG_DATA_HOME` and
    /// `HOME` is set.
    public static func path(_ name: String, variable: String,
                            environment: (String) -> String? = { getenv($0).map { String(cString: $0) } }) -> String? {
        func env(_ key: String) -> String? { environment(key).flatMap { $0.isEmpty ? nil : $0 } }
        if let file = env(variable) { return file }
        if let data = env("XDG_DATA_HOME") { return "\(data)/tally/\(name)" }
        return env("HOME").map { "\($0)/.local/share/tally/\(name)" }
    }
}
