@preconcurrency import Glibc
import TallyConcurrency
import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// The numbering the PostgreSQL store will use: each transaction takes
    /// its seqs from one counter row (`UPDATE … SET seq = seq + k RETURNING
    /// seq`), whose row lock it holds until it commits, so seqs are handed
    /// out in commit order and a rollback gives its numbers back. One
    /// NOTIFY per transaction announces the range; a listener reads "rows
    /// after my last seq" after each one.
    ///
    /// Checked: the seqs in the log are exactly 1...total; every read the
    /// listener makes continues its last seq with no gap (a gap would be a
    /// later seq visible before an earlier one); after each notification
    /// the listener has read up to the range's end; every committed
    /// transaction is announced exactly once and no rolled-back one is.
    @Suite struct CounterRow {
        static let takeSeqs = PostgresStatement("take seqs", "UPDATE tally_head SET seq = seq + $1 WHERE id = 1 RETURNING seq",
                                                parameters: [.int8])
        static let insertChanges = PostgresStatement(
            "insert changes",
            "INSERT INTO tally_log (seq, writer, data) SELECT s, $2, d FROM unnest($1::int8[], $3::bytea[]) AS u(s, d)",
            parameters: [.int8Array, .int8, .byteaArray])
        /// The same work as one statement (data-modifying CTEs, "WITH Queries"
        /// in the manual): run outside a transaction block it is its own
        /// transaction, so a commit costs one round trip instead of five
        /// (BEGIN, take, insert, notify, COMMIT) and the counter row's lock
        /// is held for one.
        static let takeInsertNotify = PostgresStatement(
            "take, insert and notify",
            """
            WITH head AS (UPDATE tally_head SET seq = seq + cardinality($1::bytea[]) WHERE id = 1 RETURNING seq),
                 inserted AS (INSERT INTO tally_log (seq, writer, data)
                              SELECT head.seq - cardinality($1::bytea[]) + u.n, $2, u.d
                              FROM head, unnest($1::bytea[]) WITH ORDINALITY AS u(d, n))
            SELECT head.seq, pg_notify('tally_changes', (head.seq - cardinality($1::bytea[]) + 1)::text || '-' || head.seq::text)
            FROM head
            """,
            parameters: [.byteaArray, .int8])
        static let changesAfter = PostgresStatement("changes after", "SELECT seq FROM tally_log WHERE seq > $1 ORDER BY seq",
                                                    parameters: [.int8])

        struct Abandoned: Error {}

        /// What the threads saw, for the checks after they end.
        struct Tally {
            var committedTransactions = 0
            var committedRows = 0
            var commitMicros: [Int64] = []
            var failures: [String] = []
            var announced: [ClosedRange<Int64>] = []
            var readUpTo: Int64 = 0
        }

        /// Transactions per run, all connections together: 400, or
        /// `TALLY_PG_COUNTER_TRANSACTIONS` for a longer measurement.
        static let transactions = getenv("TALLY_PG_COUNTER_TRANSACTIONS").flatMap { Int(String(cString: $0)) } ?? 400

        @Test(arguments: [(1, false), (4, false), (1, true), (4, true)])
        func seqsAreGapFreeInCommitOrderAndTheListenerMissesNone(connections: Int, oneStatement: Bool) throws {
            let transactionsEach = Self.transactions / connections
            let url = try freshDatabase("counter_\(connections)")
            let setup = try PostgresConnection(url: url)
            try setup.execute(script: """
                CREATE TABLE tally_head (id int PRIMARY KEY, seq int8 NOT NULL);
                INSERT INTO tally_head VALUES (1, 0);
                CREATE TABLE tally_log (seq int8 PRIMARY KEY, writer int8 NOT NULL, data bytea NOT NULL);
                """)
            let tally = LockedValueBox(Tally())
            let waker = try PostgresWaker()
            let ready = CountdownLatch(count: connections + 1)
            let go = CountdownLatch(count: 1)
            let writersDone = CountdownLatch(count: connections)
            let elapsedMicros = LockedValueBox<Int64>(0)

            onThreads(connections + 2) { index in
                switch index {
                case 0: Self.listen(url: url, ready: ready, waker: waker, tally: tally)
                case 1:
                    ready.wait()
                    let started = Self.micros()
                    go.countDown()
                    writersDone.wait()
                    elapsedMicros.withLock { $0 = Self.micros() - started }
                    // Let the listener read what the last notifications announce, then stop it.
                    // (A timeout is not thrown here: the counts checked below say what was missed.)
                    try? waitUntil("the listener to read every committed row", timeoutMillis: 30_000) {
                        tally.withLock { $0.readUpTo >= Int64($0.committedRows) }
                    }
                    waker.wake()
                default:
                    Self.write(writer: index - 2, url: url, transactions: transactionsEach, oneStatement: oneStatement,
                               ready: ready, go: go, tally: tally)
                    writersDone.countDown()
                }
            }

            let result = tally.withLock { $0 }
            #expect(result.failures.isEmpty, "\(result.failures.prefix(5))")
            let total = Int64(result.committedRows)
            // Every tenth transaction rolled back after taking its seqs.
            #expect(result.committedTransactions == connections * (transactionsEach - transactionsEach / 10))
            let log = try setup.query("SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM tally_log").firstRow()
            #expect(try log.int64(0) == total)
            #expect(try log.int64(1) == 1)
            #expect(try log.int64(2) == total, "seqs are 1...\(total) without a gap")
            #expect(try setup.query("SELECT seq FROM tally_head").firstRow().int64(0) == total)
            // Announced once each, and together exactly 1...total.
            let ranges = result.announced.sorted { $0.lowerBound < $1.lowerBound }
            #expect(ranges.count == result.committedTransactions)
            var next: Int64 = 1
            for range in ranges {
                #expect(range.lowerBound == next, "announced \(range) after \(next - 1)")
                next = range.upperBound + 1
            }
            #expect(next == total + 1)
            #expect(result.readUpTo == total)

            let seconds = Double(elapsedMicros.withLock { $0 }) / 1e6
            let latencies = result.commitMicros.sorted()
            let p50 = latencies.isEmpty ? 0 : latencies[latencies.count / 2]
            let p99 = latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
            let form = oneStatement ? "one statement" : "five round trips"
            let line = "counter row, \(form), \(connections) connection(s): \(result.committedTransactions) commits "
                + "(\(total) rows) in \(Int(seconds * 1000)) ms = \(Int(Double(result.committedTransactions) / seconds)) commits/s, "
                + "\(Int(Double(total) / seconds)) rows/s; transaction p50 \(p50) µs, p99 \(p99) µs"
            print(line)
        }

        /// One writer: `transactions` transactions of 1–4 rows each; every
        /// tenth takes its seqs and inserts, then throws (rolled back).
        static func write(writer: Int, url: String, transactions: Int, oneStatement: Bool, ready: CountdownLatch,
                          go: CountdownLatch, tally: LockedValueBox<Tally>) {
            let connection: PostgresConnection
            do {
                connection = try PostgresConnection(url: url)
            } catch {
                tally.withLock { $0.failures.append("writer \(writer) connect: \(error)") }
                ready.countDown()
                return
            }
            ready.countDown()
            go.wait()
            for number in 0..<transactions {
                let count = Int64(1 + (writer * 7 + number) % 4)
                let abandon = number % 10 == 9
                let started = micros()
                do {
                    if oneStatement {
                        let data = (0..<count).map { Array("change \(writer).\(number).\($0)".utf8) }
                        if abandon {
                            try connection.transaction {
                                try connection.execute(takeInsertNotify, [.byteaArray(data), .int8(Int64(writer))])
                                throw Abandoned()
                            }
                        } else {
                            try connection.execute(takeInsertNotify, [.byteaArray(data), .int8(Int64(writer))])
                        }
                    } else {
                        try connection.transaction {
                            let last = try connection.execute(takeSeqs, [.int8(count)]).firstRow().int64(0)
                            let seqs = Array((last - count + 1)...last)
                            try connection.execute(insertChanges, [.int8Array(seqs), .int8(Int64(writer)),
                                                                   .byteaArray(seqs.map { Array("change \($0)".utf8) })])
                            if abandon { throw Abandoned() }
                            try connection.notify("tally_changes", payload: "\(seqs[0])-\(last)")
                        }
                    }
                    let took = micros() - started
                    tally.withLock {
                        $0.committedTransactions += 1
                        $0.committedRows += Int(count)
                        $0.commitMicros.append(took)
                    }
                } catch is Abandoned {
                    continue
                } catch {
                    tally.withLock { $0.failures.append("writer \(writer) transaction \(number): \(error)") }
                }
            }
        }

        /// The listener: after every notification, reads the log after its
        /// last seq and checks the rows continue it and reach the announced end.
        static func listen(url: String, ready: CountdownLatch, waker: PostgresWaker, tally: LockedValueBox<Tally>) {
            func fail(_ message: String) { tally.withLock { $0.failures.append("listener: \(message)") } }
            let connection: PostgresConnection
            do {
                connection = try PostgresConnection(url: url)
                try connection.listen("tally_changes")
            } catch {
                fail("\(error)")
                ready.countDown()
                return
            }
            ready.countDown()
            var last: Int64 = 0
            while true {
                let outcome: PostgresWait
                do {
                    outcome = try connection.waitForNotifications(timeoutMillis: 1_000, waker: waker)
                } catch {
                    fail("\(error)")
                    return
                }
                switch outcome {
                case .woken:
                    return
                case .timedOut:
                    continue
                case .notifications(let notifications):
                    for notification in notifications {
                        let bounds = notification.payload.split(separator: "-").compactMap { Int64($0) }
                        guard bounds.count == 2, bounds[0] <= bounds[1] else {
                            fail("bad payload \(notification.payload)")
                            continue
                        }
                        do {
                            for row in try connection.execute(changesAfter, [.int8(last)]) {
                                let seq = try row.int64(0)
                                if seq != last + 1 { fail("read \(seq) after \(last): a gap") }
                                last = seq
                            }
                        } catch {
                            fail("\(error)")
                        }
                        if last < bounds[1] { fail("notified \(notification.payload) but read only up to \(last)") }
                        tally.withLock {
                            $0.announced.append(bounds[0]...bounds[1])
                            $0.readUpTo = last
                        }
                    }
                }
            }
        }

        static func micros() -> Int64 {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1_000
        }
    }
}
