import Testing
import TallyNet
@testable import TallyBench

/// `tally bench` runs (`BenchRun`): what each prints and when it fails,
/// against the hub's `/echo` in this process; the history tables from a
/// result made here.
@Suite("BenchRun")
struct BenchRunTests {
    @Test func echoReportsOneRowOfRoundTrips() throws {
        try withHub { hub, _ in
            var bench = EchoBenchmark(url: "ws://127.0.0.1:\(hub.port)/echo")
            (bench.connections, bench.messagesPerConnection, bench.size) = (2, 20, 16)
            var failures: [String] = []
            let report = try BenchRun.echo(bench, threads: 1).run(log: { _ in }) { row, _ in failures.append(row) }
            #expect(failures.isEmpty && !report.failed && report.json == nil && report.notes.isEmpty)
            #expect(report.tables.count == 1 && report.tables[0].count == 2)
            #expect(report.tables[0][1][0] == "2" && report.tables[0][1][2] == "40")
        }
    }

    @Test func connectionsCountsWhatOpened() throws {
        try withHub { hub, _ in
            var bench = ConnectionsBenchmark(url: "ws://127.0.0.1:\(hub.port)/echo")
            (bench.count, bench.concurrency) = (5, 2)
            let report = try BenchRun.connections(bench, threads: 1).run(log: { _ in }) { _, _ in }
            #expect(!report.failed && report.tables.count == 1)
            #expect(report.tables[0][1][0] == "5" && report.tables[0][1][1] == "0")
        }
    }

    @Test func aRunThatCannotStartThrowsWithoutALabel() throws {
        // Bind a server, note its port, shut it down: nothing listens there now.
        let server = try Server(configuration: testConfiguration(threads: 1), application: TestApp())
        let port = server.port
        server.shutdown()
        var bench = EchoBenchmark(url: "ws://127.0.0.1:\(port)/echo")
        bench.messagesPerConnection = 1
        #expect {
            _ = try BenchRun.echo(bench, threads: 1).run(log: { _ in }) { _, _ in }
        } throws: { error in
            (error as? BenchRun.Failure).map { $0.label == nil } ?? false
        }
    }

    static let history = HistoryBenchmark.Result(
        rows: [
            .init(size: 10, measure: .create, connections: 1, acknowledged: 500, errors: 0, seconds: 2, failure: nil,
                  hubCPUSeconds: 0.05),
            .init(size: 100, measure: .create, connections: 1, acknowledged: 400, errors: 0, seconds: 2, failure: nil,
                  hubCPUSeconds: 0.06),
            .init(size: 100, measure: .addEntry, connections: 1, acknowledged: 0, errors: 1, seconds: 2,
                  failure: "too_large", hubCPUSeconds: nil),
        ],
        fills: [.init(size: 10, finished: 10, added: 10, seconds: 0.5)],
        listEntries: 0, listSeconds: 0, listFailure: "refused",
        ratios: [.init(measure: .create, connections: 1, smallest: 250, largest: 200, smallestCPU: 100, largestCPU: 150),
                 .init(measure: .addEntry, connections: 1, smallest: 0, largest: 0)])

    @Test func historyTablesSayWhatFailedAndTheRatios() {
        var bench = HistoryBenchmark()
        bench.sizes = [100, 10]
        let tables = bench.report(Self.history)
        #expect(tables.count == 3)
        #expect(tables[0].count == 4 && tables[0][1] == ["10", "create", "1", "500", "0", "2.00", "250"])
        #expect(tables[0][3].last == "failed")
        #expect(tables[1][1] == ["10", "10", "10", "0.5", "20"])
        #expect(tables[2][0][2] == "rate at 10 (/s)" && tables[2][0][3] == "rate at 100 (/s)")
        #expect(tables[2][1] == ["create", "1", "250", "200", "0.80×", "≥ 0.8×", "yes"])
        #expect(tables[2][2] == ["addEntry", "1", "failed", "failed", "n/a", "≥ 0.8×", "n/a"])
    }

    @Test func historyNotesNameFailedRowsAndTheCPUGrowth() {
        #expect(Self.history.failedRowLines == ["100 orders, addEntry, 1 connections failed: too_large"])
        #expect(Self.history.cpuLines == ["hub CPU per op, create, 1 connections: 100.0 → 150.0 µs (1.50×)"])
    }
}
