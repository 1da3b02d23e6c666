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
    /// Reads the server's answer; stops at its head (a 101 has no body,
    /// and the bytes after it are WebSocket frames).
    var parser: HTTPResponseParser = {
        var limits = HTTPResponseLimits()
        limits.maxHeadBytes = 16 * 1024
        return HTTPResponseParser(limits: limits, reportsHead: true)
    }()

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
        let (consumed, result) = client.parser.parse(bytes)
        let head: HTTPClientResponse
        switch result {
        case .needMore: return
        case .failure(let error): return fail(client, error.message)
        case .head(let response), .response(let response): head = response
        }
        let leftover = Array(bytes[consumed...])
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
