@preconcurrency import Glibc
import TallyNet
import TallyProtocol
import TallyWebSocket

/// The CLI's connection to a hub: one request at a time, pushes buffered.
final class HubClient {
    let url: String
    private let socket: BlockingWebSocket
    private var nextID = 1
    private var pushes: [JSONObject] = []

    /// `--server`, else `$TALLY_URL`, else ws://127.0.0.1:8080; http(s)://
    /// becomes ws(s)://, and a URL without a path gets `/v1/ws`.
    static func resolveURL(_ flag: String?) -> String {
        var url = flag ?? getenv("TALLY_URL").map { String(cString: $0) } ?? "ws://127.0.0.1:8080"
        if url.hasPrefix("http://") { url = "ws://" + url.dropFirst(7) }
        if url.hasPrefix("https://") { url = "wss://" + url.dropFirst(8) }
        // The part after "scheme://": no slash means no path.
        let parts = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        let hasScheme = parts.count >= 3 && parts[0].hasSuffix(":") && parts[1].isEmpty
        if hasScheme {
            if parts.count == 3 { url += "/v1/ws" } else if parts.count == 4, parts[3].isEmpty { url += "v1/ws" }
        }
        return url
    }

    /// Connects; with a token, says hello with it first so a bad token
    /// fails here, before any command runs.
    init(access: HubAccess, loop: EventLoop) throws(CLIError) {
        url = access.url
        try access.checkTransport(url)
        var options = WebSocketOptions()
        options.maxMessageSize = 64 << 20
        do {
            socket = try BlockingWebSocket(url: url, loop: loop, options: options, timeoutMillis: 5000)
        } catch {
            throw CLIError.unreachable(url, "\(error)")
        }
        if let token = access.token {
            _ = try request(["op": "hello", "protocol": 1, "client": "tally-cli", "token": .string(token)])
        }
    }

    /// A list with every entry: its `get` reply, with the entries of the
    /// following pages appended (a reply carries at most 10,000; PROTOCOL.md,
    /// "get") and the paging members removed.
    func wholeList(_ name: String) throws(CLIError) -> JSONObject {
        var reply = try request(["op": "get", "list": .string(name)])
        var entries = reply["entries"]?.arrayValue ?? []
        var page = reply
        while page["more"] == .bool(true), let cursor = page["cursor"] {
            page = try request(["op": "get", "list": .string(name), "cursor": cursor])
            entries += page["entries"]?.arrayValue ?? []
            (reply["version"], reply["seq"]) = (page["version"], page["seq"])
        }
        reply["entries"] = .array(entries)
        (reply["more"], reply["cursor"], reply["count"]) = (nil, nil, nil)
        return reply
    }

    /// Sends `message` with a fresh id and waits for its reply; pushes that
    /// arrive first are kept for `nextPush`.
    func request(_ message: JSONObject, timeoutMillis: Int = 30_000) throws(CLIError) -> JSONObject {
        var message = message
        let id = nextID
        nextID += 1
        message["id"] = .number(JSONNumber(id))
        socket.send(.text, JSONValue.object(message).serialized())
        while true {
            let object = try receive(timeoutMillis: timeoutMillis)
            if object["op"] != nil { pushes.append(object); continue }
            guard object["id"] == .number(JSONNumber(id)) else { continue }
            if object["ok"] == .bool(true) { return object }
            throw CLIError.refused(object["error"]?.objectValue ?? [:])
        }
    }

    /// The next push (change or event); nil when `timeoutMillis` passes.
    func nextPush(timeoutMillis: Int) throws(CLIError) -> JSONObject? {
        if !pushes.isEmpty { return pushes.removeFirst() }
        do {
            return try receive(timeoutMillis: timeoutMillis)
        } catch .timeout {
            return nil
        }
    }

    private func receive(timeoutMillis: Int) throws(CLIError) -> JSONObject {
        switch socket.receive(timeoutMillis: timeoutMillis) {
        case nil:
            throw .timeout
        case .closed(let code, let reason)?:
            throw .disconnected("the hub closed the connection (\(code.rawValue)\(reason.isEmpty ? "" : ": \(reason)"))")
        case .message(_, let bytes)?:
            guard case .object(let object)? = try? JSONValue.parse(bytes, limits: Self.replyLimits) else {
                throw .disconnected("the hub sent something that is not a JSON object")
            }
            return object
        }
    }

    func close() { socket.close() }

    /// Replies carry records of up to the hub's record limit inside an
    /// envelope, so they may exceed the limits for one client message.
    static let replyLimits = JSONLimits(maxDepth: 64, maxBytes: 64 << 20, maxStringBytes: 16 << 20,
                                        maxArrayElements: 1_000_000, maxObjectMembers: 1_000_000)
}

/// Why a client command failed; each maps to a message and exit status 1.
enum CLIError: Error {
    case unreachable(String, String)
    case refused(JSONObject)
    case disconnected(String)
    case timeout
    case insecureToken(String)

    var message: String {
        switch self {
        case .unreachable(let url, let reason):
            return "cannot reach the hub at \(url): \(reason). Is 'tally serve' running? Set --server or TALLY_URL."
        case .refused(let error):
            let code = error["code"]?.stringValue ?? "error"
            let message = error["message"]?.stringValue ?? "the hub refused the request"
            return "\(message) (\(code))"
        case .disconnected(let reason):
            return reason
        case .timeout:
            return "the hub did not answer in time"
        case .insecureToken(let url):
            return "refusing to send the token in plain text to \(url): use wss:// (or https://), a loopback address, or --insecure if you accept that anyone on the network can read it"
        }
    }

    var code: String? {
        if case .refused(let error) = self { return error["code"]?.stringValue }
        return nil
    }
}
