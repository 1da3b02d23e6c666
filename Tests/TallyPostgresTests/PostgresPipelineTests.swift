import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// Several statements in one round trip (`pipeline`): results in order,
    /// a failed step's error with the later steps not run and the
    /// transaction left aborted for the caller, and the connection usable
    /// afterwards with or without the pipeline.
    @Suite struct Pipeline {
        static let insert = PostgresStatement("insert row", "INSERT INTO t VALUES ($1) RETURNING n", parameters: [.int8])
        static let count = PostgresStatement("count rows", "SELECT count(*) FROM t")

        @Test func stepsRunInOrderAndCommit() throws {
            let url = try PostgresCluster.shared().createDatabase("pipeline")
            let connection = try PostgresConnection(url: url)
            try connection.execute(script: "CREATE TABLE t (n int8 PRIMARY KEY)")
            let results = try connection.pipeline([
                .command("BEGIN"), .statement(Self.insert, [.int8(1)]), .statement(Self.insert, [.int8(2)]),
                .statement(Self.count, []), .command("COMMIT"),
            ])
            #expect(results.count == 5)
            #expect(try results[1].firstRow().int64(0) == 1)
            #expect(try results[3].firstRow().int64(0) == 2)
            #expect(results[4].commandStatus == "COMMIT")
            #expect(!connection.inTransaction)
            #expect(try connection.execute(Self.count).firstRow().int64(0) == 2)
        }

        @Test func aFailedStepStopsTheRestAndLeavesTheTransactionToRollBack() throws {
            let url = try PostgresCluster.shared().createDatabase("pipeline_fail")
            let connection = try PostgresConnection(url: url)
            try connection.execute(script: "CREATE TABLE t (n int8 PRIMARY KEY); INSERT INTO t VALUES (1)")
            let error = try #require(throws: PostgresError.self) {
                try connection.pipeline([
                    .command("BEGIN"), .statement(Self.insert, [.int8(2)]), .statement(Self.insert, [.int8(1)]),
                    .command("COMMIT"),
                ])
            }
            #expect(error.isUniqueViolation)
            #expect(error.operation == "insert row")
            // The COMMIT did not run: the transaction is open and aborted.
            #expect(connection.inTransaction)
            try connection.execute(script: "ROLLBACK")
            #expect(try connection.execute(Self.count).firstRow().int64(0) == 1)
            // And a pipeline works again.
            let again = try connection.pipeline([.statement(Self.count, [])])
            #expect(try again[0].firstRow().int64(0) == 1)
        }
    }
}
