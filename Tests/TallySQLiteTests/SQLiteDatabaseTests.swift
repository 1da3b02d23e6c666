@preconcurrency import Glibc
import TallySQLite
import TallyTestSupport
import Testing

private struct Oops: SQLiteFailure, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }
}

/// `SQLiteDatabase`, the CLI files' face of the one SQLite wrapper: values
/// round-trip, statements are reused, transactions roll back, and every
/// failure names the file and the statement.
@Suite struct SQLiteDatabaseTests {
    private func open(_ directory: TemporaryDirectory, name: String = "t.sqlite") throws(Oops) -> SQLiteDatabase<Oops> {
        try SQLiteDatabase(path: directory.path + "/" + name, label: "test file", busyTimeoutMillis: 100)
    }

    @Test func everyValueRoundTrips() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let db = try open(directory)
        try db.execute("CREATE TABLE t(a, b, c, d)")
        let values: [SQLValue] = [.null, .int(-7), .real(2.5), .text("snow ☃ \u{1F}")]
        try db.query("INSERT INTO t VALUES (?, ?, ?, ?)", values)
        #expect(try db.query("SELECT a, b, c, d FROM t") == [values])
        #expect(try db.query("SELECT b FROM t WHERE b = ?", [.int(-7)], cached: false) == [[.int(-7)]])
        #expect(SQLValue.int(3).real == 3)
    }

    @Test func opensInWALWithFullSync() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let db = try open(directory)
        #expect(try db.query("PRAGMA journal_mode", cached: false) == [[.text("wal")]])
        #expect(try db.query("PRAGMA synchronous", cached: false) == [[.int(2)]])
    }

    @Test func aKeptStatementAnswersAgainWithNewParameters() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let db = try open(directory)
        try db.execute("CREATE TABLE t(k TEXT PRIMARY KEY, v INTEGER)")
        for i in 0..<5 { try db.query("INSERT INTO t VALUES (?, ?)", [.text("k\(i)"), .int(Int64(i))]) }
        for i in 0..<5 {
            #expect(try db.query("SELECT v FROM t WHERE k = ?", [.text("k\(i)")]) == [[.int(Int64(i))]])
        }
    }

    @Test func aFailingTransactionLeavesNothing() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let db = try open(directory)
        try db.execute("CREATE TABLE t(k TEXT PRIMARY KEY)")
        #expect(throws: Oops.self) {
            try db.transaction { () throws(Oops) in
                try db.query("INSERT INTO t VALUES ('a')")
                try db.transaction { () throws(Oops) in _ = try db.query("INSERT INTO t VALUES ('b')") }
                try db.query("INSERT INTO t VALUES ('a')")
            }
        }
        #expect(try db.query("SELECT count(*) FROM t") == [[.int(0)]])
        try db.transaction { () throws(Oops) in _ = try db.query("INSERT INTO t VALUES ('c')") }
        #expect(try db.query("SELECT k FROM t") == [[.text("c")]])
    }

    @Test func failuresNameTheFileAndTheStatement() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let db = try open(directory)
        let error = #expect(throws: Oops.self) { try db.query("SELECT nope FROM nowhere") }
        #expect(error?.description == "test file '\(directory.path)/t.sqlite': no such table: nowhere (in: SELECT nope FROM nowhere)")
        let missing = directory.path + "/no/such/dir/t.sqlite"
        let opening = #expect(throws: Oops.self) {
            try SQLiteDatabase<Oops>(path: missing, label: "test file", busyTimeoutMillis: 100)
        }
        #expect(opening?.description.hasPrefix("cannot open the test file '\(missing)': ") == true)
    }

    @Test func dataVersionMovesWhenAnotherConnectionCommits() throws {
        let directory = try TemporaryDirectory(prefix: "tally-sqlite")
        let mine = try open(directory)
        let other = try open(directory)
        try mine.execute("CREATE TABLE t(k)")
        let before = try other.dataVersion()
        #expect(try other.dataVersion() == before)
        try mine.query("INSERT INTO t VALUES (1)")
        #expect(try other.dataVersion() != before)
    }
}
