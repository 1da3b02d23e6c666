@preconcurrency import Glibc
import CLinuxShim
import TallyTLS
import TallyWebSocket

/// Opens client WebSocket connections (ws:// and wss://) on an event loop,
/// with the same codec, compression and timeouts as the server.
public enum WebSocketClient {
    /// Connects to `url`. Resolution happens on the calling thread (it may
    /// block); everything else on `loop`. `completion` runs on the loop thread
    /// with the open socket or the reason it failed; `makeHandler` is called
    /// on the loop thread just before.
    public static func connect(
        to url: String, on loop: EventLoop, options: WebSocketOptions = WebSocketOptions(),
        tls: TLSContext? = nil, subprotocols: [String] = [], headers: [(String, String)] = [],
        handler makeHandler: @escaping @Sendable (WebSocket) -> any WebSocketHandler,
        completion: @escaping @Sendable (Result<WebSocket, ClientError>) -> Void
    ) {
        let parsed: WebSocketURL
        let address: SocketAddress
        let tlsContext: TLSContext?
        do {
            parsed = try WebSocketURL(url)
            tlsContext = parsed.secure ? try (tls ?? TLSContext.client()) : nil
        } catch let error as ClientError {
            loop.execute { completion(.failure(error)) }
            return
        } catch {
            loop.execute { completion(.failure(.tls("\(error)"))) }
            return
        }
        do {
            address = try SocketAddress.resolve(host: parsed.host, port: parsed.port, passive: false)
        } catch {
            loop.execute { completion(.failure(.resolve(error.description))) }
            return
        }
        loop.execute {
            open(address: address, url: parsed, tls: tlsContext, headers: headers, subprotocols: subprotocols,
                 options: options, loop: loop, makeHandler: makeHandler, completion: completion)
        }
    }

    private static func open(
        address: SocketAddress, url: WebSocketURL, tls: TLSContext?, headers: [(String, String)],
        subprotocols: [String], options: WebSocketOptions, loop: EventLoop,
        makeHandler: @escaping (WebSocket) -> any WebSocketHandler,
        completion: @escaping (Result<WebSocket, ClientError>) -> Void
    ) {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            return completion(.failure(.connect(String(cString: strerror(errno)))))
        }
        Sys.setNoDelay(fd)
        let rc = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        if rc != 0, errno != EINPROGRESS {
            let message = String(cString: strerror(errno))
            Sys.close(fd)
            return completion(.failure(.connect("\(url.host):\(url.port): \(message)")))
        }
        signal(SIGPIPE, SIG_IGN)
        let connection = Connection(fd: fd, loop: loop, role: .client, options: options, server: nil, phase: .connecting)
        connection.client = ClientHandshake(url: url, subprotocols: subprotocols, extraHeaders: headers,
                                            makeHandler: makeHandler, completion: completion)
        if let tls {
            do {
                connection.tls = try TLSSession(context: tls, fd: fd, isServer: false, serverName: url.host)
            } catch {
                Sys.close(fd)
                return completion(.failure(.tls(error.message)))
            }
        }
        do {
            try connection.register(events: Connection.baseEvents | EPOLLOUT.rawValue)
        } catch {
            Sys.close(fd)
            return completion(.failure(.connect(error.description)))
        }
        loop.ensureSweeping(every: sweepInterval(options))
    }
}
