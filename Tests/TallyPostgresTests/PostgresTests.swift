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
