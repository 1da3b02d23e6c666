@preconcurrency import Glibc
import TallyPostgres
import TallyTestSupport
import Testing

/// Every suite that talks to a server, nested here so they run one at a
/// time: they share the process's cluster (`PostgresCluster.shared()`,
/// started once, stopped at exit), one of them restarts it, and one
/// measures commit rates.
@Suite(.serialized) struct PostgresTests {}

/// A new, empty database on the shared cluster; its URL.
func freshDatabase(_ name: String) throws -> String {
    try PostgresCluster.shared().createDatabase(name)
}

/// A connection to a new, empty database.
func freshConnection(_ name: String) throws -> PostgresConnection {
    try PostgresConnection(url: freshDatabase(name))
}

/// Runs `body(index)` on `count` new threads and waits for all of them.
/// Each thread opens its own connections: a connection has one owner thread.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    final class Job: @unchecked Sendable {  // handed to exactly one thread
        let index: Int
        let body: @Sendable (Int) -> Void
        init(_ index: Int, _ body: @escaping @Sendable (Int) -> Void) { self.index = index; self.body = body }
    }
    var threads: [pthread_t] = []
    for index in 0..<count {
        var thread = pthread_t()
        let job = Unmanaged.passRetained(Job(index, body))
        let rc = pthread_create(&thread, nil, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            job.body(job.index)
            return nil
        }, job.toOpaque())
        precondition(rc == 0, "pthread_create: \(rc)")
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
}

/// The error `body` throws as a `PostgresError`, or a test failure.
func postgresError(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> PostgresError? {
    do {
        try body()
    } catch let error as PostgresError {
        return error
    } catch {
        Issue.record("threw \(error), not a PostgresError", sourceLocation: sourceLocation)
        return nil
    }
    Issue.record("did not throw", sourceLocation: sourceLocation)
    return nil
}
