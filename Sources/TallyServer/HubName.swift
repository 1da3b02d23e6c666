@preconcurrency import Glibc

/// A hub's name (config `hubName`, `tally serve --hub-name`): what
/// `GET /v1/admin/clients` shows as each client's `hub`, and the key of the
/// hub's rows in `tally_clients` when several hubs share a database — so
/// each hub on one database needs a name of its own.
///
/// By default `<hostname>:<port>`, unique as long as no two machines share a
/// host name. A name given is 1 to 128 characters from `A–Z a–z 0–9 . _ : @
/// / -`: it lands in logs and JSON, and an operator types it.
public enum HubName {
    static let maxLength = 128

    /// Why `name` cannot be a hub's name, or nil when it can.
    public static func problem(_ name: String) -> String? {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-".utf8)
        guard !name.isEmpty, name.utf8.count <= maxLength, name.utf8.allSatisfy(allowed.contains) else {
            return "must be 1 to \(maxLength) characters from A-Z a-z 0-9 . _ : @ / -, such as \"storeroom-1\""
        }
        return nil
    }

    /// `<hostname>:<port>`: the machine's host name (gethostname(2)) and the
    /// port the hub listens on.
    public static func standard(port: Int) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let host = gethostname(&buffer, buffer.count - 1) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        return "\(host.isEmpty ? "localhost" : host):\(port)"
    }
}
