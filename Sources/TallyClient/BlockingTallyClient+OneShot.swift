import TallyProtocol

/// The one-shot commands' requests: one connection, one request, closed.
extension BlockingTallyClient {
    /// Sends `message` on a connection of its own and returns the reply
    /// without `id` and `ok` (what `--json` prints).
    public static func ask(_ access: HubAccess, _ message: JSONObject) throws(HubError) -> JSONObject {
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        var reply = try client.request(message)
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
}
