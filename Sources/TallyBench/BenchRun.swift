import TallyNet

/// One `tally bench` run as the command line asks for it: a benchmark with
/// its options, run to what it prints. The CLI parses flags into one of
/// these, calls `run`, and prints the `Report`; everything between (the
/// descriptor limit, client loops, the writer counts one after another,
/// which rows failed) happens here.
public enum BenchRun: Sendable {
    /// Round trips against an echo endpoint, from `threads` client loops.
    case echo(EchoBenchmark, threads: Int)
    /// Idle connections, from `threads` client loops.
    case connections(ConnectionsBenchmark, threads: Int)
    case fanout(FanoutRounds)
    /// Delivery on one hub and across hubs on a PostgreSQL store.
    case crossHub(CrossHubBenchmark)
    /// The template run once per writer count, against a fresh hub each.
    case writes(WriteBenchmark, writerCounts: [Int])
    case startup(BrokerStartupBenchmark)
    case soak(SoakBenchmark)
    /// `json`: the result as one JSON document instead of tables.
    case history(HistoryBenchmark, json: Bool)
    /// Photo analysis and thumbnails in this process, step by step.
    case analysis(AnalysisBenchmark)
    /// Fan-out p99 on one hub idle and while it analyses photos.
    case analysisFanout(AnalysisFanoutBenchmark)

    /// What a run prints: tables (standard output, `renderTable` each, a
    /// blank line between), or `json` instead; `notes` for standard error
    /// after them; `failed` when the exit status should say so.
    public struct Report: Sendable {
        public var tables: [[[String]]] = []
        public var json: String?
        public var notes: [String] = []
        public var failed = false
    }

    /// The run as a whole could not be made; `label` says which (nil: the
    /// error says it all).
    public struct Failure: Error {
        public var label: String?
        public var error: any Error
    }

    /// Runs the benchmark. Progress lines go to `log`, the count of opened
    /// connections (`connections`) to `opened`; a row or round that could
    /// not run goes to `rowFailed` with what it was (`writes 10`) and makes
    /// the report `failed`, the others still run.
    public func run(log: (String) -> Void, opened: @escaping @Sendable (Int) -> Void = { _ in },
                    rowFailed: (String, any Error) -> Void) throws(Failure) -> Report {
        raiseDescriptorLimit()
        var report = Report()
        switch self {
        case .echo(let bench, let threads):
            do {
                report.tables = [bench.report(try bench.run(group: try EventLoopGroup(threads: threads)))]
            } catch { throw Failure(label: nil, error: error) }
        case .connections(let bench, let threads):
            let r: ConnectionsBenchmark.Result
            do { r = try bench.run(group: try EventLoopGroup(threads: threads), progress: opened) } catch {
                throw Failure(label: nil, error: error)
            }
            (report.tables, report.failed) = ([r.report], r.failed > 0)
        case .fanout(let rounds):
            let outcome = rounds.run(log: log) { round, error in rowFailed(round, error) }
            (report.tables, report.failed) = ([outcome.report], outcome.failed)
        case .crossHub(let bench):
            let outcome = bench.run(log: log) { round, error in rowFailed(round, error) }
            (report.tables, report.failed) = ([outcome.report], outcome.failed)
        case .writes(let template, let counts):
            var rows = [WriteBenchmark.reportHeader]
            for count in counts {
                var bench = template
                bench.writers = count
                do {
                    let r = try bench.run(log: log)
                    rows.append(bench.reportRow(r))
                    if r.errors > 0 { report.failed = true }
                } catch {
                    rowFailed("writes \(count)", error)
                    report.failed = true
                }
            }
            report.tables = [rows]
        case .startup(let bench):
            do { report.tables = [bench.report(try bench.run(log: log))] } catch {
                throw Failure(label: "startup", error: error)
            }
        case .soak(let bench):
            let r: SoakBenchmark.Result
            do { r = try bench.run(log: log) } catch { throw Failure(label: "soak", error: error) }
            (report.tables, report.notes, report.failed) = ([r.samplesReport, r.summaryReport], r.problemLines, r.errors > 0)
        case .analysis(let bench):
            do { report.tables = bench.report(try bench.run(log: log)) } catch {
                throw Failure(label: "analysis", error: error)
            }
        case .analysisFanout(let bench):
            let r: AnalysisFanoutBenchmark.Result
            do { r = try bench.run(log: log) } catch { throw Failure(label: "analysis-fanout", error: error) }
            report.tables = bench.report(r)
            report.notes = r.load.errors.map { "background client: \($0)" }
            report.failed = !r.load.errors.isEmpty
        case .history(let bench, let json):
            let r: HistoryBenchmark.Result
            do { r = try bench.run(log: log) } catch { throw Failure(label: "history", error: error) }
            report.failed = r.rows.contains { $0.failed }
            report.notes = r.failedRowLines
            if json {
                report.json = r.json
            } else {
                report.tables = bench.report(r)
                report.notes += r.cpuLines + (r.listFailure.map { ["list: \($0)"] } ?? [])
            }
        }
        return report
    }
}
