import TallyConcurrency
import TallyPostgres

/// A few PostgreSQL connections that threads take turns with: the photo
/// uploads and downloads run on several worker threads, and each needs a
/// session of its own for as long as its statement runs.
///
/// libpq: "no two threads attempt to manipulate the same PGconn object at
/// the same time" ("Behavior in Threaded Programs"). So a connection has one
/// user at a time: `withConnection` takes one out of the idle list under the
/// pool's lock (making one when fewer than `capacity` exist, else waiting
/// for one to come back) and puts it back when its body returns.
///
/// A lost session is retried once: a statement that finds the connection
/// gone (a server restart, a terminated backend) runs again on a new session
/// (`reconnect`, PQreset). Only single statements outside transactions run
/// here, so running one again is what the caller would do anyway. A server
/// that stays away fails the call with `SharedTableError.unreachable`.
final class PostgresPool: Sendable {
    private struct State: Sendable {
        var idle: [PooledConnection] = []
        /// Connections made and not closed, idle or lent.
        var open = 0
        var closed = false
    }

    private enum Turn {
        case lent(PooledConnection)
        case make
        case closed
    }

    let url: PostgresURL
    let options: PostgresConnection.Options
    let capacity: Int
    private let state = ConditionLock(State())

    init(url: PostgresURL, options: PostgresConnection.Options, capacity: Int) {
        self.url = url
        self.options = options
        self.capacity = max(1, capacity)
    }

    deinit {
        close()
    }

    /// Runs `body` with a connection no other thread uses meanwhile,
    /// retried once on a new session when it finds the session lost.
    ///
    /// - Parameter operation: what the statement does, for the error
    ///   ("store a photo").
    func withConnection<R>(doing operation: String,
                           _ body: (PostgresConnection) throws(PostgresError) -> R) throws(SharedTableError) -> R {
        let pooled = try take(doing: operation)
        defer { giveBack(pooled) }
        do throws(PostgresError) {
            return try pooled.connection.retryingLostSession(body)
        } catch {
            throw SharedTableError(error, doing: operation)
        }
    }

    /// Puts a connection made elsewhere (the one that migrated the schema)
    /// in the idle list.
    func adopt(_ connection: PostgresConnection) {
        let closed = state.withLock { state -> Bool in
            guard !state.closed, state.open < capacity else { return true }
            state.open += 1
            state.idle.append(PooledConnection(connection))
            return false
        }
        if closed { connection.close() } else { state.signal() }
    }

    /// Closes the idle connections now and the lent ones as they come back;
    /// later calls fail.
    func close() {
        let idle = state.withLock { state -> [PooledConnection] in
            state.closed = true
            state.open -= state.idle.count
            defer { state.idle = [] }
            return state.idle
        }
        state.broadcast()
        for pooled in idle { pooled.connection.close() }
    }

    /// An idle connection, a new one (connected here, outside the lock), or
    /// a wait until one comes back.
    private func take(doing operation: String) throws(SharedTableError) -> PooledConnection {
        let turn = state.wait { state -> Turn? in
            if state.closed { return .closed }
            if let pooled = state.idle.popLast() { return .lent(pooled) }
            guard state.open < capacity else { return nil }
            state.open += 1
            return .make
        }
        switch turn {
        case .lent(let pooled):
            return pooled
        case .closed:
            throw SharedTableError(unreachable: false, operation: operation, detail: "the connection pool is closed")
        case .make:
            do throws(PostgresError) {
                return PooledConnection(try PostgresConnection(url: url, options: options))
            } catch {
                state.withLock { $0.open -= 1 }
                state.signal()
                throw SharedTableError(error, doing: operation)
            }
        }
    }

    private func giveBack(_ pooled: PooledConnection) {
        let closed = state.withLock { state -> Bool in
            if state.closed {
                state.open -= 1
                return true
            }
            state.idle.append(pooled)
            return false
        }
        if closed { pooled.connection.close() } else { state.signal() }
    }
}

/// A connection while it sits in a pool or is lent out.
///
/// `@unchecked Sendable`: in the idle list nobody touches it; taken out
/// under the pool's lock it has exactly one user until that user gives it
/// back, so no two threads ever use the `PGconn` at once.
private final class PooledConnection: @unchecked Sendable {
    let connection: PostgresConnection

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }
}
