import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// Failures carry the server's SQLSTATE and words and what the caller
    /// was doing; the helpers classify them; the connection survives a
    /// statement's failure.
    @Suite struct Errors {
        @Test func aUniqueViolationCarriesItsSQLStateKeyAndConstraint() throws {
            let db = try freshConnection("unique")
            try db.execute(script: "CREATE TABLE records (name text PRIMARY KEY, version int8)")
            let insert = PostgresStatement("insert record", "INSERT INTO records VALUES ($1, $2)", parameters: [.text, .int8])
            try db.execute(insert, [.text("items/a"), .int8(1)])
            let error = postgresError { try db.execute(insert, [.text("items/a"), .int8(2)]) }
            #expect(error?.sqlState == "23505")
            #expect(error?.isUniqueViolation == true)
            #expect(error?.isConnectionLost == false)
            #expect(error?.kind == .server)
            #expect(error?.constraint == "records_pkey")
            #expect(error?.detail == "Key (name)=(items/a) already exists.")
            #expect(error?.operation == "insert record")
            #expect(error?.description.hasPrefix("insert record: duplicate key value violates unique constraint") == true)
            // The connection goes on.
            #expect(try db.query("SELECT count(*) FROM records").firstRow().int64(0) == 1)
        }

        @Test func aSyntaxErrorIsAServerErrorNamingTheStatement() throws {
            let db = try freshConnection("syntax")
            let error = postgresError { try db.query("SELEC 1") }
            #expect(error?.sqlState == "42601")
            #expect(error?.kind == .server)
            #expect(error?.operation == "SELEC 1")
            #expect(error?.message == "syntax error at or near \"SELEC\"")
        }

        @Test func aConcurrentUpdateUnderSerializableIsASerializationFailure() throws {
            let url = try freshDatabase("serializable")
            let first = try PostgresConnection(url: url)
            let second = try PostgresConnection(url: url)
            try first.execute(script: "CREATE TABLE t (k int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0)")
            let error = postgresError {
                try first.transaction(.serializable) {
                    _ = try first.query("SELECT v FROM t WHERE k = 1")  // takes the snapshot
                    try second.query("UPDATE t SET v = 2 WHERE k = 1")  // commits on its own
                    try first.query("UPDATE t SET v = 3 WHERE k = 1")
                }
            }
            #expect(error?.sqlState == "40001")
            #expect(error?.isSerializationFailure == true)
            #expect(!first.inTransaction)
            #expect(try first.query("SELECT v FROM t").firstRow().int64(0) == 2)
        }

        @Test func aRefusedConnectionIsConnectionLostAndHidesThePassword() throws {
            // Port 1 is privileged and unused: the connection is refused at once.
            let error = postgresError { _ = try PostgresConnection(url: "postgres://tally:hunter2@127.0.0.1:1/stock") }
            #expect(error?.kind == .connection)
            #expect(error?.isConnectionLost == true)
            #expect(error?.description.contains("\"127.0.0.1\", port 1 failed") == true, "\(String(describing: error))")
            #expect(error?.description.contains("hunter2") == false, "\(String(describing: error))")
            #expect(error?.server == "postgres://tally:***@127.0.0.1:1/stock")
        }

        @Test func aMissingDatabaseSaysSo() throws {
            let cluster = try PostgresCluster.shared()
            let error = postgresError { _ = try PostgresConnection(url: cluster.url(database: "no_such_db")) }
            #expect(error?.kind == .connection)
            #expect(error?.message.contains("database \"no_such_db\" does not exist") == true, "\(String(describing: error))")
        }

        @Test func aClosedConnectionRefusesWork() throws {
            let db = try freshConnection("closed")
            db.close()
            db.close()
            #expect(!db.isConnected)
            let error = postgresError { try db.query("SELECT 1") }
            #expect(error?.kind == .usage)
            #expect(error?.message == "the connection is closed")
        }

        @Test func noticesAreKeptNotPrinted() throws {
            let db = try freshConnection("notices")
            try db.execute(script: "DO $$ BEGIN RAISE NOTICE 'stock is low'; END $$")
            #expect(db.lastNotice == PostgresNotice(severity: "NOTICE", sqlState: "00000", message: "stock is low"))
        }
    }

    /// Transactions as closure scopes.
    @Suite struct Transactions {
        struct Refused: Error {}

        @Test func aThrowRollsEverythingBack() throws {
            let db = try freshConnection("rollback")
            try db.execute(script: "CREATE TABLE t (k int8 PRIMARY KEY)")
            #expect(throws: Refused.self) {
                try db.transaction {
                    try db.query("INSERT INTO t VALUES (1), (2)")
                    #expect(db.inTransaction)
                    throw Refused()
                }
            }
            #expect(!db.inTransaction)
            #expect(try db.query("SELECT count(*) FROM t").firstRow().int64(0) == 0)
        }

        @Test func aReturnCommitsAndPassesTheResult() throws {
            let db = try freshConnection("commit")
            try db.execute(script: "CREATE TABLE t (k int8 PRIMARY KEY)")
            let count = try db.transaction {
                try db.query("INSERT INTO t VALUES (1), (2)")
                // A nested scope joins the outer transaction.
                try db.transaction { try db.query("INSERT INTO t VALUES (3)") }
                return try db.query("SELECT count(*) FROM t").firstRow().int64(0)
            }
            #expect(count == 3)
            #expect(try db.query("SELECT count(*) FROM t").firstRow().int64(0) == 3)
        }

        @Test func aFailedStatementCaughtInsideStillFailsTheCommit() throws {
            let db = try freshConnection("aborted")
            try db.execute(script: "CREATE TABLE t (k int8 PRIMARY KEY)")
            let error = postgresError {
                try db.transaction {
                    try db.query("INSERT INTO t VALUES (1)")
                    _ = try? db.query("INSERT INTO t VALUES (1)")  // fails; the transaction is now aborted
                }
            }
            #expect(error?.sqlState == "25P02")
            #expect(error?.operation == "commit")
            #expect(!db.inTransaction)
            #expect(try db.query("SELECT count(*) FROM t").firstRow().int64(0) == 0)
        }

        @Test func aConstraintCheckedAtCommitFailsTheCommit() throws {
            let db = try freshConnection("deferred")
            try db.execute(script: """
                CREATE TABLE t (k int8, CONSTRAINT one_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)
                """)
            let error = postgresError {
                try db.transaction {
                    _ = try db.query("INSERT INTO t VALUES (1), (1)")
                }
            }
            #expect(error?.isUniqueViolation == true)
            #expect(error?.operation == "commit")
            #expect(error?.commitOutcomeUnknown == false)
            #expect(try db.query("SELECT count(*) FROM t").firstRow().int64(0) == 0)
        }
    }
}
