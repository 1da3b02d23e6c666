@preconcurrency import Glibc
import CLinuxShim
import TallyConcurrency
import TallyHTTP
import TallyTLS

/// The HTTP + WebSocket server: one listening socket shared by every loop
/// (each loop accepts from it with EPOLLEXCLUSIVE, so a new connection wakes
/// one loop, and stays on the loop that accepted it).
public final class Server: Sendable {
    public let group: EventLoopGroup
    public let configuration: ServerConfiguration
    let context: ServerContext
    private let listenFD: Int32
    /// The bound port (useful when the configuration asked for port 0).
    public let port: Int
    private let stopped = LockedValueBox(false)

    /// Binds, listens and starts the loops. Throws when the address cannot be
    /// bound, with the reason.
    public init(configuration: ServerConfiguration, application: any HTTPApplication) throws(SystemError) {
        self.configuration = configuration
        self.context = ServerContext(configuration: configuration, application: application)
        let address = try SocketAddress.resolve(host: configuration.host, port: configuration.port, passive: true)
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError("socket", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = address.withSockAddr { bind(fd, $0, $1) }
        guard bound == 0 else {
            let e = errno
            Sys.close(fd)
            throw SystemError("bind \(configuration.host):\(configuration.port)", errno: e)
        }
        guard listen(fd, configuration.listenBacklog) == 0 else {
            let e = errno
            Sys.close(fd)
            throw SystemError("listen", errno: e)
        }
        listenFD = fd
        port = SocketAddress.localPort(of: fd)
        // The hub never wants SIGPIPE: a peer that vanished is an error value.
        signal(SIGPIPE, SIG_IGN)
        do {
            group = try EventLoopGroup(threads: configuration.threads, clock: configuration.clock)
        } catch {
            Sys.close(fd)
            throw error
        }
        for loop in group.loops {
            let context = self.context
            loop.execute {
                let listener = Listener(fd: fd, loop: loop, context: context)
                listener.start()
            }
        }
    }

    /// Graceful shutdown: stop accepting, close WebSockets with 1001, let
    /// responses and close handshakes finish for up to `shutdownGraceMillis`,
    /// then close what is left and end the loops. Returns when done.
    public func shutdown() {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        let grace = configuration.shutdownGraceMillis
        let done = CountdownLatch(count: group.loops.count)
        for loop in group.loops {
            let fd = listenFD
            loop.execute {
                loop.deregister(fd: fd)
                loop.beginShutdown(graceMillis: grace) { done.countDown() }
            }
        }
        done.wait()
        group.shutdown()
        Sys.close(listenFD)
    }

    public func metricsSnapshot() -> NetMetricsSnapshot { group.metricsSnapshot() }
}

/// Accepts connections on one loop and starts their sweep timer.
final class Listener: EventSource {
    let fd: Int32
    let loop: EventLoop
    let context: ServerContext

    init(fd: Int32, loop: EventLoop, context: ServerContext) {
        self.fd = fd
        self.loop = loop
        self.context = context
    }

    func start() {
        listen()
        loop.ensureSweeping(every: sweepInterval(context.configuration))
    }

    private func listen() {
        // EPOLLEXCLUSIVE: one loop wakes per new connection, not all of them.
        do {
            try loop.register(self, fd: fd, events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue)
        } catch {
            context.configuration.logger.error("server.listen_failed", ["error": "\(error)"])
        }
    }

    func handleEvents(_ events: UInt32) {
        for _ in 0..<64 {
            let client = accept4(fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))
            if client < 0 {
                let e = errno
                if e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED { return }
                if e == EMFILE || e == ENFILE {
                    // Out of descriptors: back off for a moment instead of spinning.
                    context.configuration.logger.warning("server.accept_backoff", ["error": "too many open files"])
                    loop.deregister(fd: fd)
                    loop.scheduleTimer(afterMillis: 100) { [self] in listen() }
                }
                return
            }
            accepted(client)
        }
    }

    private func accepted(_ fd: Int32) {
        Sys.setNoDelay(fd)
        let configuration = context.configuration
        let connection = Connection(fd: fd, loop: loop, role: .server, options: configuration.webSocket,
                                    server: context, phase: configuration.tls == nil ? .http : .tlsHandshake)
        if let tlsContext = configuration.tls {
            do {
                connection.tls = try TLSSession(context: tlsContext, fd: fd, isServer: true)
            } catch {
                configuration.logger.warning("tls.session_failed", ["error": error.message])
                Sys.close(fd)
                return
            }
        } else {
            connection.httpParser = HTTPRequestParser(limits: configuration.httpLimits, reportsHeads: true)
        }
        do {
            try connection.register()
        } catch {
            Sys.close(fd)
            return
        }
        loop.metrics.add(.connectionsAccepted)
    }
}

/// How often a loop checks timeouts: often enough for the shortest one.
func sweepInterval(_ configuration: ServerConfiguration) -> Int64 {
    let ws = configuration.webSocket
    let shortest = min(ws.pingIntervalMillis, ws.idleTimeoutMillis, ws.closeTimeoutMillis,
                       configuration.requestTimeoutMillis, configuration.keepAliveTimeoutMillis,
                       configuration.tlsHandshakeTimeoutMillis)
    return max(20, min(1000, shortest / 4))
}

/// The sweep interval a client connection with these options needs.
func sweepInterval(_ options: WebSocketOptions) -> Int64 {
    let shortest = min(options.pingIntervalMillis, options.idleTimeoutMillis, options.closeTimeoutMillis)
    return max(20, min(1000, shortest / 4))
}

extension EventLoop {
    /// Runs every connection's `sweep` periodically (timeouts and pings), at
    /// the shortest interval any connection on this loop asked for.
    func ensureSweeping(every millis: Int64) {
        if let current = sweepIntervalMillis, current <= millis { return }
        let first = sweepIntervalMillis == nil
        sweepIntervalMillis = millis
        if first { scheduleSweep() }
    }

    private func scheduleSweep() {
        scheduleTimer(afterMillis: sweepIntervalMillis ?? 1000) { [self] in
            let now = self.now
            forEachSource { ($0 as? Connection)?.sweep(now: now) }
            scheduleSweep()
        }
    }

    /// Closes every connection politely, then calls `done` when all are gone
    /// or the grace period ran out.
    func beginShutdown(graceMillis: Int64, done: @escaping () -> Void) {
        isShuttingDown = true
        forEachSource { source in
            guard let connection = source as? Connection else { return }
            connection.shutdownGracefully()
        }
        let deadline = now + graceMillis
        func check() {
            if connectionCount == 0 || now >= deadline {
                forEachSource { ($0 as? Connection)?.closeNow() }
                done()
            } else {
                scheduleTimer(afterMillis: 10) { check() }
            }
        }
        check()
    }
}

extension Connection {
    /// Server shutdown: WebSockets get 1001, idle HTTP connections close,
    /// connections in the middle of a request finish it and then close.
    func shutdownGracefully() {
        switch phase {
        case .webSocket:
            startClose(.goingAway, reason: "server shutting down")
        case .http:
            if httpParser?.isIdle ?? true { closeNow() } else { closeAfterFlush = true }
        case .connecting, .tlsHandshake, .clientHandshake:
            closeNow()
        case .closing, .closed:
            break
        }
    }
}
