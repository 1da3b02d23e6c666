@preconcurrency import Glibc
import Testing
import TallyTestSupport
@testable import TallyTLS



/// A connected AF_UNIX stream pair, both ends non-blocking: a loopback
/// "network" with real socket semantics (partial writes, EAGAIN, EOF, EPIPE).
final class SocketPair {
    private(set) var serverFD: Int32
    private(set) var clientFD: Int32

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
            throw TestFailure("socketpair failed: errno \(errno)")
        }
        for fd in fds {
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
                throw TestFailure("fcntl O_NONBLOCK failed: errno \(errno)")
            }
        }
        serverFD = fds[0]
        clientFD = fds[1]
    }

    func closeServer() {
        if serverFD >= 0 { close(serverFD); serverFD = -1 }
    }

    func closeClient() {
        if clientFD >= 0 { close(clientFD); clientFD = -1 }
    }

    deinit {
        closeServer()
        closeClient()
    }
}

/// A server certificate made for one test, with a server context over it.
final class Fixture {
    let directory: TemporaryDirectory
    let certificateFile: String
    let keyFile: String
    let serverContext: TLSContext

    init(commonName: String = "tally-test") throws {
        directory = try TemporaryDirectory()
        (certificateFile, keyFile) = try TLSSelfSigned.generate(commonName: commonName, directory: directory.path)
        serverContext = try TLSContext.server(certificateChainFile: certificateFile, privateKeyFile: keyFile)
    }

    /// A connected server and client session over a fresh socket pair.
    func connect(client: TLSContext, serverName: String? = nil) throws -> Connection {
        let pair = try SocketPair()
        let server = try TLSSession(context: serverContext, fd: pair.serverFD, isServer: true)
        let clientSession = try TLSSession(context: client, fd: pair.clientFD, isServer: false, serverName: serverName)
        return Connection(pair: pair, server: server, client: clientSession)
    }
}

/// Both ends of one TLS connection, driven alternately on this thread.
struct Connection {
    let pair: SocketPair
    let server: TLSSession
    let client: TLSSession

    /// Steps both handshakes until each is done or has ended; no threads,
    /// no sleeps: each step makes progress or both sides are waiting.
    func handshake() -> (client: TLSIOResult, server: TLSIOResult) {
        var clientResult = TLSIOResult.wantWrite
        var serverResult = TLSIOResult.wantRead
        for _ in 0..<100 {
            if !Self.isFinal(clientResult) { clientResult = client.handshake() }
            if !Self.isFinal(serverResult) { serverResult = server.handshake() }
            if Self.isFinal(clientResult) && Self.isFinal(serverResult) { break }
            // A side that failed stops; the other then sees the alert or EOF.
            if case .failed = clientResult, !Self.isFinal(serverResult) { pair.closeClient() }
            if case .failed = serverResult, !Self.isFinal(clientResult) { pair.closeServer() }
        }
        return (clientResult, serverResult)
    }

    private static func isFinal(_ result: TLSIOResult) -> Bool {
        switch result {
        case .done, .closed, .failed: true
        case .wantRead, .wantWrite: false
        }
    }
}

/// Sends all of `bytes` from `sender` to `receiver`, alternating partial
/// writes and reads as a single-threaded event loop would.
/// Returns what arrived and how many writes were partial.
func transfer(_ bytes: [UInt8], from sender: TLSSession, to receiver: TLSSession,
              readSize: Int = 16 * 1024) throws -> (received: [UInt8], partialWrites: Int) {
    var sent = 0
    var partialWrites = 0
    var received: [UInt8] = []
    received.reserveCapacity(bytes.count)
    var buffer = [UInt8](repeating: 0, count: readSize)
    var idleRounds = 0
    while received.count < bytes.count {
        var progressed = false
        if sent < bytes.count {
            let result = bytes.withUnsafeBytes { all in
                sender.write(UnsafeRawBufferPointer(rebasing: all[sent...]))
            }
            switch result {
            case .done(let count):
                if sent + count < bytes.count { partialWrites += 1 }
                sent += count
                progressed = count > 0
            case .wantRead, .wantWrite:
                break
            case .closed, .failed:
                throw TestFailure("write: \(result)")
            }
        }
        // Drain everything readable, including what OpenSSL buffered.
        while true {
            let result = buffer.withUnsafeMutableBytes { receiver.read(into: $0) }
            guard case .done(let count) = result else {
                if case .wantRead = result { break }
                throw TestFailure("read: \(result)")
            }
            received.append(contentsOf: buffer[..<count])
            progressed = true
        }
        idleRounds = progressed ? 0 : idleRounds + 1
        if idleRounds > 10 { throw TestFailure("transfer stalled at \(received.count) of \(bytes.count)") }
    }
    return (received, partialWrites)
}

/// Deterministic non-repeating-looking bytes, so misordered chunks show.
func patternBytes(count: Int, seed: UInt32) -> [UInt8] {
    var state = seed | 1
    return (0..<count).map { _ in
        state ^= state << 13; state ^= state >> 17; state ^= state << 5
        return UInt8(truncatingIfNeeded: state)
    }
}

extension TLSIOResult {
    var failureMessage: String? {
        if case .failed(let message) = self { return message }
        return nil
    }
}
