@preconcurrency import Glibc
import Testing
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyStore
import TallyHubTestSupport
import TallyTestSupport
import TallyWebSocket

// Fixtures for end-to-end tests of the hub: a real Hub on 127.0.0.1 port 0,
// WebSocket clients speaking the sync protocol, and a small blocking HTTP
// client for REST. Nothing sleeps to synchronise: every wait is for a message
// with a deadline, and "nothing else arrived" is checked with a sentinel
// request whose reply must come next (guarantee 4 of PROTOCOL.md).

/// How long a test waits for something that should happen at once.
let messageTimeout = 3_000

/// A running hub and a client loop; `close()` shuts both down.
final class HubFixture {
    let hub: Hub
    let clients: EventLoopGroup
    var port: Int { hub.port }

    /// - Parameter store: opened already for `dataDirectory` (a store with
    ///   faults in it); nil lets the hub open its own.
    init(dataDirectory: String = ":memory:", store: (any Store)? = nil,
         _ adjust: (inout HubConfiguration) -> Void = { _ in }) throws {
        var configuration = HubConfiguration.forTests(dataDirectory: dataDirectory, threads: 2,
                                                      shutdownGraceMillis: 1_000)
        adjust(&configuration)
        if let store {
            hub = try Hub(configuration: configuration, store: store)
        } else {
            hub = try Hub(configuration: configuration)
        }
        do {
            clients = try EventLoopGroup(threads: 1)
        } catch {
            hub.shutdown()
            throw error
        }
    }

    /// The hub first, so its close frames still reach live clients.
    func close() {
        hub.shutdown()
        clients.shutdown()
    }

    func connect() throws -> SyncClient {
        try SyncClient(url: "ws://127.0.0.1:\(port)/v1/ws", loop: clients.next())
    }

    func http(_ method: String, _ target: String, headers: [String: String] = [:], body: String? = nil) throws -> HTTPResult {
        try HTTPResult.fetch(port: port, method, target, headers: headers, body: body)
    }

    /// A reader of the hub's store: what it reports is committed.
    func storeReader() throws -> any StoreReading {
        try hub.core.store.makeReader()
    }
}

/// Runs `body` against a fresh hub and shuts it down, also when `body` throws.
func withHub<R>(dataDirectory: String = ":memory:", _ adjust: (inout HubConfiguration) -> Void = { _ in },
                _ body: (HubFixture) throws -> R) throws -> R {
    let fixture = try HubFixture(dataDirectory: dataDirectory, adjust)
    defer { fixture.close() }
    return try body(fixture)
}

/// One server message: its bytes and the object they parse to.
struct Message {
    var bytes: [UInt8]
    var object: JSONObject
    var text: String { String(decoding: bytes, as: UTF8.self) }
    subscript(key: String) -> JSONValue? { object[key] }
    var isPush: Bool { object["op"] != nil }
    var error: JSONObject? { object["error"]?.objectValue }
    var errorCode: String? { error?["code"]?.stringValue }
}

/// A sync protocol client over BlockingWebSocket.
final class SyncClient {
    let socket: BlockingWebSocket
    private var sentinels = 0

    init(url: String, loop: EventLoop) throws {
        socket = try BlockingWebSocket(url: url, loop: loop, timeoutMillis: messageTimeout)
    }

    func send(_ text: String) { socket.send(.text, Array(text.utf8)) }

    /// The next text message, parsed.
    func next(timeoutMillis: Int = messageTimeout) throws -> Message {
        switch socket.receive(timeoutMillis: timeoutMillis) {
        case .message(.text, let payload)?:
            guard case .object(let object) = try JSONValue.parse(payload) else {
                throw TestFailure("not a JSON object: \(String(decoding: payload, as: UTF8.self))")
            }
            return Message(bytes: payload, object: object)
        case .message(let kind, _)?: throw TestFailure("expected a text message, got \(kind)")
        case .closed(let code, let reason)?: throw TestFailure("closed \(code.rawValue) '\(reason)'")
        case nil: throw TestFailure("no message within \(timeoutMillis) ms")
        }
    }

    /// Sends `text` and returns the next message, which must be a reply.
    @discardableResult
    func request(_ text: String) throws -> Message {
        send(text)
        let message = try next()
        guard !message.isPush else { throw TestFailure("expected a reply, got a push: \(message.text)") }
        return message
    }

    /// Sends a request that must succeed and returns its reply.
    @discardableResult
    func ok(_ text: String) throws -> Message {
        let reply = try request(text)
        guard reply["ok"] == true else { throw TestFailure("\(text) failed: \(reply.text)") }
        return reply
    }

    /// The next push (a message with an `op`).
    func push() throws -> Message {
        let message = try next()
        guard message.isPush else { throw TestFailure("expected a push, got \(message.text)") }
        return message
    }

    /// Asserts that nothing is queued for this client: a sentinel request's
    /// reply is the next message. Returns what came instead, if anything.
    @discardableResult
    func expectNothingPending(sourceLocation: SourceLocation = #_sourceLocation) throws -> [Message] {
        sentinels += 1
        let id = "sentinel-\(sentinels)"
        send(#"{"op":"get","name":"sentinel/none","id":"\#(id)"}"#)
        var unexpected: [Message] = []
        while true {
            let message = try next()
            if message["id"] == .string(id) { break }
            unexpected.append(message)
        }
        #expect(unexpected.isEmpty, "unexpected: \(unexpected.map(\.text))", sourceLocation: sourceLocation)
        return unexpected
    }

    func close() { socket.close() }
}

// MARK: - HTTP

/// A response read off a plain TCP connection.
struct HTTPResult {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    var json: JSONObject {
        get throws {
            guard case .object(let object) = try JSONValue.parse(body) else {
                throw TestFailure("body is not a JSON object: \(String(decoding: body, as: UTF8.self))")
            }
            return object
        }
    }

    /// One request on a fresh connection (`Connection: close`).
    static func fetch(port: Int, _ method: String, _ target: String, headers: [String: String],
                      body: String?) throws -> HTTPResult {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        defer { Glibc.close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = INADDR_LOOPBACK.bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else { throw TestFailure("connect: errno \(errno)") }

        let payload = Array((body ?? "").utf8)
        var request = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        if body != nil { request += "Content-Type: application/json\r\nContent-Length: \(payload.count)\r\n" }
        request += "\r\n"
        let bytes = Array(request.utf8) + payload
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TestFailure("send: errno \(errno)") }
            sent += n
        }

        // Read until the head and Content-Length bytes of body are in.
        var received: [UInt8] = []
        let deadline = monotonicMillis() + Int64(messageTimeout)
        var parsed: (status: Int, headers: [(name: String, value: String)], bodyStart: Int, length: Int)?
        while true {
            if parsed == nil, let end = headEnd(received) {
                parsed = try parseHead(Array(received[..<end]), bodyStart: end)
            }
            if let parsed, received.count >= parsed.bodyStart + parsed.length {
                return HTTPResult(status: parsed.status, headers: parsed.headers,
                                  body: Array(received[parsed.bodyStart..<(parsed.bodyStart + parsed.length)]))
            }
            let left = deadline - monotonicMillis()
            guard left > 0 else { throw TestFailure("no complete response within \(messageTimeout) ms") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(left))
            if ready <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw TestFailure("connection closed after \(received.count) bytes") }
            received += chunk[..<n]
        }
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i + 4
        }
        return nil
    }

    private static func parseHead(_ head: [UInt8], bodyStart: Int) throws
        -> (status: Int, headers: [(name: String, value: String)], bodyStart: Int, length: Int) {
        let lines = String(decoding: head, as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: true)
        guard let statusLine = lines.first else { throw TestFailure("empty response head") }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, let status = Int(parts[1]) else { throw TestFailure("bad status line \(statusLine)") }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            headers.append((String(line[..<colon]), String(value)))
        }
        let length = headers.first { $0.name.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? 0
        return (status, headers, bodyStart, length)
    }
}

extension JSONValue {
    /// For comparing numbers in replies with Int64 values from elsewhere.
    static func int(_ value: Int64) -> JSONValue { .number(JSONNumber(value)) }
}
