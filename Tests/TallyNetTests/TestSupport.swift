@preconcurrency import Glibc
import Dispatch
import Synchronization
import Testing
import TallyConcurrency
import TallyTestSupport
import TallyHTTP
@testable import TallyNet
import TallyServer
import TallyTLS
import TallyWebSocket

// Shared fixtures for the TallyNet tests: servers on 127.0.0.1 port 0,
// applications with recording handlers, and a raw TCP client that speaks
// HTTP and WebSocket by hand. Nothing here sleeps to synchronise: every wait
// is on an event (a semaphore, a readable socket) with a deadline.


/// How long a test waits for something that should happen at once. Generous,
/// so a loaded 2-core machine does not fail a correct server; a broken one
/// still fails well within the 5 s budget of a test.
let eventTimeout = 3_000

// MARK: - Servers

/// A configuration for tests: loopback, port 0, quiet, and a short shutdown
/// grace so a test whose peer never answers the close still ends quickly.
func testConfiguration(threads: Int = 2, _ adjust: (inout ServerConfiguration) -> Void = { _ in }) -> ServerConfiguration {
    var configuration = ServerConfiguration()
    configuration.host = "127.0.0.1"
    configuration.port = 0
    configuration.threads = threads
    configuration.logger = .disabled
    configuration.shutdownGraceMillis = 1_000
    adjust(&configuration)
    return configuration
}

/// Starts a server and a client loop group, runs `body`, then shuts both
/// down (the server first, so its close frames still reach live clients).
func withServer<R>(_ configuration: ServerConfiguration, _ application: any HTTPApplication,
                   clientThreads: Int = 1,
                   _ body: (Server, EventLoopGroup) throws -> R) throws -> R {
    let server = try Server(configuration: configuration, application: application)
    let clients: EventLoopGroup
    do {
        clients = try EventLoopGroup(threads: clientThreads)
    } catch {
        server.shutdown()
        throw error
    }
    defer {
        server.shutdown()
        clients.shutdown()
    }
    return try body(server, clients)
}

/// Starts the real hub (routes /healthz, /metrics, /echo) on port 0.
func withHub<R>(_ adjust: (inout HubConfiguration) -> Void = { _ in },
                _ body: (Hub, EventLoopGroup) throws -> R) throws -> R {
    var configuration = HubConfiguration()
    configuration.server = testConfiguration()
    configuration.dataDirectory = ":memory:"  // tests never write ./tally-data
    adjust(&configuration)
    let hub = try Hub(configuration: configuration)
    let clients: EventLoopGroup
    do {
        clients = try EventLoopGroup(threads: 1)
    } catch {
        hub.shutdown()
        throw error
    }
    defer {
        hub.shutdown()
        clients.shutdown()
    }
    return try body(hub, clients)
}

/// Starts a server whose loop reads `ManualClock` time (one loop, so every
/// connection shares it) and a client loop group on the real clock, runs
/// `body`, then shuts both down. The shutdown moves the clock along so its
/// grace timers run.
func withManualClock<R>(_ configuration: ServerConfiguration, _ application: any HTTPApplication,
                        _ body: (Server, EventLoopGroup, ManualClock) throws -> R) throws -> R {
    let clock = ManualClock()
    var configuration = configuration
    configuration.threads = 1
    configuration.clock = clock
    let server = try Server(configuration: configuration, application: application)
    let clients: EventLoopGroup
    do {
        clients = try EventLoopGroup(threads: 1)
    } catch {
        shutDown(server, moving: clock)
        throw error
    }
    defer {
        shutDown(server, moving: clock)
        clients.shutdown()
    }
    return try body(server, clients, clock)
}

private func shutDown(_ server: Server, moving clock: ManualClock) {
    let done = CountdownLatch(count: 1)
    DispatchQueue.global().async {
        server.shutdown()
        done.countDown()
    }
    while !done.wait(timeoutMillis: 5) {
        clock.advance(byMillis: 10)
        for loop in server.group.loops { loop.execute {} }
    }
}

extension ManualClock {
    /// Lets `server`'s loops take in what was already sent to them, moves
    /// the clock, and returns once every loop has run the timers that came
    /// due (the timeout sweep among them). Nothing sleeps: each step waits
    /// for the loops to say they are done.
    func advance(byMillis millis: Int64, on server: Server) throws {
        // Two iterations: a connection accepted in the first is read in the
        // second (its descriptor joins the next `epoll_wait`).
        try settle(server.group)
        try settle(server.group)
        advance(byMillis: millis)
        try settle(server.group)
    }
}

/// Returns once every loop of `group` has finished an iteration that began
/// after this call: its events read, its due timers run.
func settle(_ group: EventLoopGroup) throws {
    let latch = CountdownLatch(count: group.loops.count)
    for loop in group.loops {
        // A timer due now runs after the events and the mailbox; the hook
        // after every timer of that iteration (the sweep's deadline may tie).
        loop.execute { loop.scheduleTimer(afterMillis: 0) { loop.atIterationEnd { latch.countDown() } } }
    }
    guard latch.wait(timeoutMillis: eventTimeout) else { throw TestFailure("a loop did not finish an iteration") }
}

func wsURL(_ port: Int, _ path: String = "/ws", secure: Bool = false) -> String {
    "\(secure ? "wss" : "ws")://127.0.0.1:\(port)\(path)"
}

/// Polls `condition` in small steps until it holds or `timeoutMillis` pass.
/// For state that has no event to wait on (metrics counters).
func eventually(timeoutMillis: Int = eventTimeout, _ condition: () -> Bool) -> Bool {
    let deadline = Sys.monotonicMillis() + Int64(timeoutMillis)
    while true {
        if condition() { return true }
        if Sys.monotonicMillis() >= deadline { return false }
        usleep(2_000)
    }
}

// MARK: - Applications

/// A thread-safe queue of events that a test thread waits on.
final class EventLog<Event: Sendable>: Sendable {
    private let events = LockedValueBox<[Event]>([])
    private let arrived = DispatchSemaphore(value: 0)

    func append(_ event: Event) {
        events.withLock { $0.append(event) }
        arrived.signal()
    }

    /// The next event, or nil after `timeoutMillis`.
    func next(timeoutMillis: Int = eventTimeout) -> Event? {
        if arrived.wait(timeout: .now() + .milliseconds(timeoutMillis)) == .timedOut { return nil }
        return events.withLock { $0.removeFirst() }
    }

    /// Waits for the next event that `match` accepts, dropping the others.
    func next<T>(timeoutMillis: Int = eventTimeout, _ match: (Event) -> T?) -> T? {
        let deadline = Sys.monotonicMillis() + Int64(timeoutMillis)
        while true {
            let left = Int(deadline - Sys.monotonicMillis())
            guard left > 0, let event = next(timeoutMillis: left) else { return nil }
            if let found = match(event) { return found }
        }
    }
}

/// What a server-side handler saw.
enum ServerEvent: Sendable {
    case open(subprotocol: String?, deflate: Bool, loop: Int)
    case message(WebSocketMessageKind, [UInt8])
    case closed(WebSocketCloseCode, String)

    var closeCode: (WebSocketCloseCode, String)? {
        if case .closed(let code, let reason) = self { return (code, reason) }
        return nil
    }
    var opened: (subprotocol: String?, deflate: Bool)? {
        if case .open(let subprotocol, let deflate, _) = self { return (subprotocol, deflate) }
        return nil
    }
}

typealias MessageAction = @Sendable (WebSocket, WebSocketMessageKind, [UInt8]) -> Void

/// Sends every message back as it came.
let echo: MessageAction = { socket, kind, payload in socket.send(kind, payload) }

/// A handler that records its events and reacts to messages with `onMessage`.
final class RecordingHandler: WebSocketHandler {
    let log: EventLog<ServerEvent>?
    let onMessage: MessageAction
    let onOpen: (@Sendable (WebSocket) -> Void)?
    let onClose: (@Sendable (WebSocket) -> Void)?

    init(log: EventLog<ServerEvent>?, onOpen: (@Sendable (WebSocket) -> Void)? = nil,
         onClose: (@Sendable (WebSocket) -> Void)? = nil, onMessage: @escaping MessageAction) {
        self.log = log
        self.onOpen = onOpen
        self.onClose = onClose
        self.onMessage = onMessage
    }

    func webSocketDidOpen(_ socket: WebSocket) {
        log?.append(.open(subprotocol: socket.subprotocol, deflate: socket.deflate != nil, loop: socket.loop.id))
        onOpen?(socket)
    }

    func webSocket(_ socket: WebSocket, didReceive kind: WebSocketMessageKind, _ payload: [UInt8]) {
        log?.append(.message(kind, payload))
        onMessage(socket, kind, payload)
    }

    func webSocketDidClose(_ socket: WebSocket, code: WebSocketCloseCode, reason: String) {
        log?.append(.closed(code, reason))
        onClose?(socket)
    }
}

/// A WebSocket route whose handlers record into `log` and act with `onMessage`.
func recordingRoute(log: EventLog<ServerEvent>? = nil, subprotocols: [String] = [],
                    requiresSubprotocol: Bool = false,
                    onOpen: (@Sendable (WebSocket) -> Void)? = nil,
                    onClose: (@Sendable (WebSocket) -> Void)? = nil,
                    onMessage: @escaping MessageAction = echo) -> WebSocketRoute {
    WebSocketRoute(subprotocols: subprotocols, requiresSubprotocol: requiresSubprotocol) { _ in
        RecordingHandler(log: log, onOpen: onOpen, onClose: onClose, onMessage: onMessage)
    }
}

/// A tiny application: WebSocket routes by path, plus `/hello` and `/world`
/// answering their own names as text, and a JSON 404 for the rest.
final class TestApp: HTTPApplication {
    let routes: [String: WebSocketRoute]

    init(_ routes: [String: WebSocketRoute] = ["/ws": recordingRoute()]) {
        self.routes = routes
    }

    func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction {
        if let route = routes[request.path] { return .upgrade(route) }
        switch request.path {
        case "/hello": return .respond(.text(.ok, "hello"))
        case "/world": return .respond(.text(.ok, "world"))
        default: return .respond(.error(.notFound, code: "not_found", message: "no route for \(request.path)"))
        }
    }
}

/// Moves a loop-confined value into a `@Sendable` closure that runs on its loop.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

// MARK: - Our client

extension BlockingWebSocket {
    /// The next message, or a failure naming what came instead.
    func expectMessage(timeoutMillis: Int = eventTimeout) throws -> (kind: WebSocketMessageKind, payload: [UInt8]) {
        switch receive(timeoutMillis: timeoutMillis) {
        case .message(let kind, let payload)?: return (kind, payload)
        case .closed(let code, let reason)?: throw TestFailure("expected a message, got close \(code.rawValue) '\(reason)'")
        case nil: throw TestFailure("no message within \(timeoutMillis) ms")
        }
    }

    /// The close event, or a failure naming what came instead.
    func expectClose(timeoutMillis: Int = eventTimeout) throws -> (code: WebSocketCloseCode, reason: String) {
        switch receive(timeoutMillis: timeoutMillis) {
        case .closed(let code, let reason)?: return (code, reason)
        case .message(_, let payload)?: throw TestFailure("expected a close, got a message of \(payload.count) bytes")
        case nil: throw TestFailure("no close within \(timeoutMillis) ms")
        }
    }
}

/// WebSocket options for a client or server with compression on or off.
func options(deflate: Bool = true, _ adjust: (inout WebSocketOptions) -> Void = { _ in }) -> WebSocketOptions {
    var options = WebSocketOptions()
    options.deflate.enabled = deflate
    adjust(&options)
    return options
}

/// Connects with the event-loop client and reports what was negotiated
/// (then closes the socket): for facts `BlockingWebSocket` does not expose.
func negotiate(url: String, loop: EventLoop, subprotocols: [String],
               options: WebSocketOptions = WebSocketOptions()) -> Result<String?, ClientError> {
    let done = DispatchSemaphore(value: 0)
    let outcome = LockedValueBox<Result<String?, ClientError>?>(nil)
    WebSocketClient.connect(to: url, on: loop, options: options, subprotocols: subprotocols,
                            handler: { _ in RecordingHandler(log: nil, onMessage: { _, _, _ in }) }) { result in
        switch result {
        case .success(let socket):
            outcome.withLock { $0 = .success(socket.subprotocol) }
            socket.close()
        case .failure(let error):
            outcome.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    if done.wait(timeout: .now() + .milliseconds(eventTimeout)) == .timedOut {
        return .failure(.handshake("test: no answer within \(eventTimeout) ms"))
    }
    return outcome.withLock { $0! }
}

// MARK: - Data

/// Deterministic bytes that do not repeat with a short period, so a
/// misordered or truncated copy shows.
func patternBytes(count: Int, seed: UInt32 = 0x9E37_79B9) -> [UInt8] {
    var state = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        state ^= state << 13; state ^= state >> 17; state ^= state << 5
        out[i] = UInt8(truncatingIfNeeded: state)
    }
    return out
}

/// Printable ASCII (valid UTF-8) of `count` bytes.
func textBytes(count: Int) -> [UInt8] {
    let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789 .,-ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
    return patternBytes(count: count).map { alphabet[Int($0) % alphabet.count] }
}

// MARK: - Files


// MARK: - Raw TCP client

/// An HTTP response read off a raw socket.
struct RawResponse {
    var head: HTTPClientResponse
    var body: [UInt8]
    var status: Int { head.status }
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// A blocking TCP client for speaking HTTP and WebSocket by hand: requests
/// and frames are written byte for byte, answers are read with deadlines
/// (poll), never with sleeps.
final class RawSocket {
    private(set) var fd: Int32
    /// Bytes read but not yet consumed.
    private var buffered: [UInt8] = []
    private var decoder = WebSocketDecoder(role: .client, maxMessageSize: 64 << 20)
    private var events: [WebSocketEvent] = []
    private var encoder = WebSocketEncoder(role: .client)
    private(set) var sawEOF = false

    /// Connects to 127.0.0.1:`port`. `receiveBuffer` shrinks SO_RCVBUF
    /// (before connecting, so the advertised window is small too).
    init(port: Int, receiveBuffer: Int32? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = INADDR_LOOPBACK.bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TestFailure("connect: errno \(e)")
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    // MARK: Writing

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw TestFailure("send: errno \(errno)")
            }
            sent += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Sends one masked WebSocket frame, as a client must.
    func sendMessage(_ kind: WebSocketMessageKind, _ payload: [UInt8]) throws {
        try send(payload.withUnsafeBytes { encoder.message(kind, $0) })
    }

    func sendClose(_ code: WebSocketCloseCode = .normal) throws {
        try send(encoder.close(code, reason: ""))
    }

    // MARK: Reading

    /// Reads what is available into `buffered`, waiting up to the deadline.
    /// Returns false at EOF; throws when nothing arrived in time.
    @discardableResult
    private func fill(deadline: Int64) throws -> Bool {
        if sawEOF { return false }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let left = deadline - Sys.monotonicMillis()
            if left <= 0 { throw TestFailure("timed out waiting for data (have \(buffered.count) bytes)") }
            let rc = poll(&pfd, 1, Int32(left))
            if rc < 0 && errno == EINTR { continue }
            if rc <= 0 { continue }
            break
        }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { return true }
            if errno == ECONNRESET { sawEOF = true; return false }
            throw TestFailure("recv: errno \(errno)")
        }
        if n == 0 { sawEOF = true; return false }
        buffered.append(contentsOf: chunk[..<n])
        return true
    }

    private func deadline(_ timeoutMillis: Int) -> Int64 { Sys.monotonicMillis() + Int64(timeoutMillis) }

    /// Exactly `count` bytes.
    func read(count: Int, timeoutMillis: Int = eventTimeout) throws -> [UInt8] {
        let end = deadline(timeoutMillis)
        while buffered.count < count {
            guard try fill(deadline: end) else { throw TestFailure("EOF after \(buffered.count) of \(count) bytes") }
        }
        let out = Array(buffered[..<count])
        buffered.removeFirst(count)
        return out
    }

    /// Everything until the peer closes.
    func readToEOF(timeoutMillis: Int = eventTimeout) throws -> [UInt8] {
        let end = deadline(timeoutMillis)
        while try fill(deadline: end) {}
        let out = buffered
        buffered = []
        return out
    }

    /// Whether the peer closed (EOF or reset) within the timeout, discarding data.
    func waitForEOF(timeoutMillis: Int = eventTimeout) -> Bool {
        let end = deadline(timeoutMillis)
        do {
            while try fill(deadline: end) { buffered.removeAll(keepingCapacity: true) }
            return true
        } catch {
            return false
        }
    }

    /// One HTTP response (head, then a Content-Length body unless `bodyless`,
    /// as for a response to HEAD or a 1xx).
    func readResponse(timeoutMillis: Int = eventTimeout, bodyless: Bool = false) throws -> RawResponse {
        let end = deadline(timeoutMillis)
        var parser = HTTPResponseParser(limits: HTTPResponseLimits(maxBodyBytes: 64 << 20), isHeadRequest: bodyless,
                                        reportsHead: true)
        while true {
            if !buffered.isEmpty {
                let (consumed, result) = parser.parse(buffered[...])
                buffered.removeFirst(consumed)
                switch result {
                case .needMore: break
                case .head(let head) where head.status < 200: return RawResponse(head: head, body: [])
                case .head: continue
                case .response(let response): return RawResponse(head: response, body: response.body)
                case .failure(let error): throw TestFailure("bad response: \(error.message)")
                }
            }
            guard try fill(deadline: end) else {
                throw TestFailure("EOF before a whole response; got '\(String(decoding: buffered, as: UTF8.self))'")
            }
        }
    }

    /// Sends an opening handshake for `path` and reads the answer; after a
    /// 101 the socket speaks WebSocket (see `nextEvent`).
    @discardableResult
    func upgrade(path: String = "/ws", headers: [String] = []) throws -> RawResponse {
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        for header in headers { request += header + "\r\n" }
        request += "\r\n"
        try send(request)
        let response = try readResponse()
        guard response.status == 101 else { throw TestFailure("expected 101, got \(response.status): \(response.text)") }
        guard response.head.headers["Sec-WebSocket-Accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" else {
            throw TestFailure("wrong Sec-WebSocket-Accept")
        }
        return response
    }

    /// The next WebSocket event the server sent; nil at EOF.
    func nextEvent(timeoutMillis: Int = eventTimeout) throws -> WebSocketEvent? {
        let end = deadline(timeoutMillis)
        while events.isEmpty {
            if !buffered.isEmpty {
                let input = buffered
                buffered = []
                var found: [WebSocketEvent] = []
                let failure = input.withUnsafeBytes { decoder.feed($0) { found.append($0) } }
                if let failure { throw TestFailure("server sent an invalid frame: \(failure.code.rawValue) \(failure.reason)") }
                events += found
                continue
            }
            guard try fill(deadline: end) else { return nil }
        }
        return events.removeFirst()
    }

    /// Raw bytes already read past the last response or frame consumed.
    func takeBuffered() -> [UInt8] {
        let out = buffered
        buffered = []
        return out
    }
}


/// A counter shared between a test thread and loop threads.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    func add(_ n: Int = 1) { atomic.add(n, ordering: .relaxed) }
    var value: Int { atomic.load(ordering: .relaxed) }
}
