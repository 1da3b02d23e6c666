import TallyProtocol

/// The one-shot commands' requests: one connection, one request, closed —
/// on the first hub of the list that can be reached.
extension BlockingTallyClient {
    /// Sends `message` on a connection of its own and returns the reply
    /// without `id` and `ok` (what `--json` prints).
    ///
    /// A read (`get`) or a write with an idempotency key (`idem`) whose
    /// connection is lost before the reply goes to the next hub of the list;
    /// any other write does not, since it may have landed (the error says so).
    public static func ask(_ access: HubAccess, _ message: JSONObject) throws(HubError) -> JSONObject {
        let repeatable = message["op"]?.stringValue == "get" || message["idem"] != nil
        var reply = try onFirstReachable(access, repeatable: repeatable) { client throws(HubError) in
            try client.request(message)
        }
        (reply["id"], reply["ok"]) = (nil, nil)
        return reply
    }

    /// Sends one write (`idem`: its idempotency key) on a connection of its
    /// own; the reply as `ask` returns it.
    public static func write(_ access: HubAccess, _ operation: WriteOperation, idem: String? = nil) throws(HubError) -> JSONObject {
        var message = operation.json
        if let idem { message["idem"] = .string(idem) }
        return try ask(access, message)
    }

    /// Runs `body` on a connection to the first hub of `access` that can be
    /// reached, then closes it.
    ///
    /// Hubs that share one database answer alike, so when the connection is
    /// lost (or the hub stays silent) before `body` is done and the work is
    /// `repeatable` — a read, a write with an idempotency key — it runs again
    /// on the next hub of the list. Work that is not repeatable fails there:
    /// it may have been applied, and a second hub would apply it again.
    /// - Throws: the last failure; when every hub failed, `noneReachable`
    ///   naming each one tried.
    public static func onFirstReachable<T>(_ access: HubAccess, repeatable: Bool,
                                           _ body: (BlockingTallyClient) throws(HubError) -> T) throws(HubError) -> T {
        var remaining = access
        var failures: [HubError] = []
        while true {
            let client: BlockingTallyClient
            do { client = try BlockingTallyClient(access: remaining) } catch {
                switch error {
                case .unreachable where !failures.isEmpty: throw .noneReachable(failures + [error])
                case .noneReachable(let later): throw .noneReachable(failures + later)
                default: throw error
                }
            }
            defer { client.close() }
            let reason: String
            do { return try body(client) } catch {
                switch error {
                case .disconnected(let why): reason = why
                case .timeout: reason = error.description
                default: throw error
                }
            }
            guard repeatable else { throw notRepeated(reason, at: client.url, listed: access.hubs.count > 1) }
            failures += client.passedOver
            let lost = HubError.unreachable(url: client.url, reason: "the connection was lost before the answer: \(reason)")
            let next = client.hubIndex + 1
            guard next < remaining.hubs.count else {
                throw failures.isEmpty ? .disconnected(reason) : .noneReachable(failures + [lost])
            }
            failures.append(lost)
            remaining.servers = Array(remaining.hubs[next...])
        }
    }

    /// A write lost with its connection, not sent to another hub.
    private static func notRepeated(_ reason: String, at url: String, listed: Bool) -> HubError {
        guard listed else { return .disconnected(reason) }
        return .disconnected("\(reason). The write may or may not have been applied by the hub at \(url); it was not sent to another hub because it has no idempotency key (give one with --idem KEY, and a retry anywhere applies it once)")
    }
}
