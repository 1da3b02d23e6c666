@preconcurrency import Glibc
import CLinuxShim
import TallyHTTP
import TallyWebSocket

/// Why a client connection failed.
public enum ClientError: Error, Sendable, CustomStringConvertible {
    case invalidURL(String)
    case resolve(String)
    case connect(String)
    case tls(String)
    case handshake(String)

    public var description: String {
        switch self {
        case .invalidURL(let m): "invalid URL: \(m)"
        case .resolve(let m): "cannot resolve host: \(m)"
        case .connect(let m): "cannot connect: \(m)"
        case .tls(let m): "TLS failed: \(m)"
        case .handshake(let m): "WebSocket handshake failed: \(m)"
        }
    }
}

/// A client connection's handshake in flight: what was offered, what to
/// check in the answer, and whom to tell.
final class ClientHandshake {
    let url: WebSocketURL
    let key: String
    let subprotocols: [String]
    let extraHeaders: [(String, String)]
    let makeHandler: (WebSocket) -> any WebSocketHandler
    private var completion: ((Result<WebSocket, ClientError>) -> Void)?
    /// The response head as it arrives (bounded).
    var response: [UInt8] = []
    static let maxResponseHead = 16 * 1024

    init(url: WebSocketURL, subprotocols: [String], extraHeaders: [(String, String)],
         makeHandler: @escaping (WebSocket) -> any WebSocketHandler,
         completion: @escaping (Result<WebSocket, ClientError>) -> Void) {
        self.url = url
        self.key = WebSocketHandshake.makeKey()
        self.subprotocols = subprotocols
        self.extraHeaders = extraHeaders
        self.makeHandler = makeHandler
        self.completion = completion
    }

    func succeed(_ socket: WebSocket) {
        let completion = self.completion
        self.completion = nil
        completion?(.success(socket))
    }

    func fail(_ error: ClientError) {
        let completion = self.completion
        self.completion = nil
        completion?(.failure(error))
    }
}

/// Client side: connect, TLS, the opening handshake (RFC 6455 §4.1).
extension Connection {
    func finishConnect() {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
        guard error == 0 else {
            client?.fail(.connect(String(cString: strerror(error))))
            closeNow()
            return
        }
        if tls != nil {
            enter(.tlsHandshake)
            driveTLSHandshake()
        } else {
            sendClientHandshake()
        }
    }

    func sendClientHandshake() {
        guard let client else { return }
        var request = "GET \(client.url.requestTarget) HTTP/1.1\r\n"
        request += "Host: \(client.url.hostHeader)\r\n"
        request += "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: \(client.key)\r\nSec-WebSocket-Version: 13\r\n"
        if !client.subprotocols.isEmpty {
            request += "Sec-WebSocket-Protocol: \(client.subprotocols.joined(separator: ", "))\r\n"
        }
        if options.deflate.enabled {
            request += "Sec-WebSocket-Extensions: \(PerMessageDeflateNegotiation.offer(config: options.deflate))\r\n"
        }
        for (name, value) in client.extraHeaders { request += "\(name): \(value)\r\n" }
        request += "\r\n"
        enter(.clientHandshake)
        setWriteInterest(false)
        enqueue(Array(request.utf8))
    }

    func processClientHandshake(_ bytes: UnsafeRawBufferPointer) {
        guard let client else { return }
        client.response.append(contentsOf: bytes)
        guard let end = ResponseHead.endOfHead(client.response) else {
            if client.response.count > ClientHandshake.maxResponseHead {
                fail(client, "the response head is larger than \(ClientHandshake.maxResponseHead) bytes")
            }
            return
        }
        let head: ResponseHead
        do {
            head = try ResponseHead.parse(client.response[..<end])
        } catch {
            return fail(client, error.message)
        }
        let leftover = Array(client.response[end...])
        client.response = []
        guard head.status == 101 else {
            return fail(client, "the server answered \(head.status) \(head.reason) instead of 101")
        }
        guard head.headers.containsToken("Upgrade", "websocket"),
              head.headers.containsToken("Connection", "upgrade") else {
            return fail(client, "the 101 response lacks 'Upgrade: websocket' or 'Connection: Upgrade'")
        }
        guard head.headers["Sec-WebSocket-Accept"]?.trimmingSpaces == WebSocketHandshake.acceptValue(forKey: client.key) else {
            return fail(client, "'Sec-WebSocket-Accept' does not match the key sent")
        }
        var subprotocol: String?
        if let chosen = head.headers["Sec-WebSocket-Protocol"]?.trimmingSpaces {
            guard client.subprotocols.contains(chosen) else {
                return fail(client, "the server chose subprotocol '\(chosen)', which was not offered")
            }
            subprotocol = chosen
        }
        var deflate: PerMessageDeflateParameters?
        let extensions = head.headers.values("Sec-WebSocket-Extensions")
        if !extensions.isEmpty {
            guard options.deflate.enabled, extensions.count == 1 else {
                return fail(client, "the server accepted extensions that were not offered: \(extensions.joined(separator: ", "))")
            }
            do {
                deflate = try PerMessageDeflateNegotiation.confirm(response: extensions[0], config: options.deflate)
            } catch {
                return fail(client, error.reason)
            }
        }
        openWebSocket(subprotocol: subprotocol, deflate: deflate, makeHandler: client.makeHandler)
        self.client = nil
        if let socket { client.succeed(socket) }
        if !leftover.isEmpty, phase == .webSocket {
            leftover.withUnsafeBytes { processWebSocket($0) }
        }
    }

    private func fail(_ client: ClientHandshake, _ message: String) {
        client.fail(.handshake(message))
        closeNow()
    }
}

/// The status line and headers of an HTTP response, for the client handshake.
struct ResponseHead {
    var status: Int
    var reason: String
    var headers: HTTPHeaders

    struct Malformed: Error { var message: String }

    /// The index just past the blank line ending the head, if present.
    static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 3..<bytes.count where bytes[i] == 10 && bytes[i - 1] == 13 && bytes[i - 2] == 10 && bytes[i - 3] == 13 {
            return i + 1
        }
        return nil
    }

    static func parse(_ bytes: ArraySlice<UInt8>) throws(Malformed) -> ResponseHead {
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: true)
        guard !lines.isEmpty else { throw Malformed(message: "empty response") }
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]), (100...599).contains(status) else {
            throw Malformed(message: "malformed status line: \(statusLine.prefix(80))")
        }
        var headers = HTTPHeaders()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else {
                throw Malformed(message: "malformed header line: \(line.prefix(80))")
            }
            headers.add(String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces)
        }
        return ResponseHead(status: status, reason: parts.count > 2 ? String(parts[2]) : "", headers: headers)
    }
}
