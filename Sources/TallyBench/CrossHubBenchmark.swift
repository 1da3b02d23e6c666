/// Delivery across hubs that share a PostgreSQL store: one record updated
/// at a steady rate, its subscribers on the writing hub or on another hub,
/// beside the same on one SQLite hub. The three paths take turns `rounds`
/// times with fresh hubs (and fresh databases' worth of rows: the store
/// keeps earlier rounds' record), each row pooling its rounds, so all
/// three meet the same drifts of a shared machine.
///
/// What it answers: what a subscriber on another hub pays — the latency
/// (the NOTIFY, the other hub's read of the log, its push) and the hub CPU
/// per delivered message, both hubs counted — against one on the writing hub.
public struct CrossHubBenchmark: Sendable {
    public enum Path: String, Sendable, CaseIterable {
        case sqlite = "SQLite, same hub"
        case postgres = "PostgreSQL, same hub"
        case crossHub = "PostgreSQL, across hubs"
    }

    /// The PostgreSQL database the hubs share.
    public var store: String
    /// What every round shares (subscribers, rate, threads); its store,
    /// hubs and seconds are set per round.
    public var template = FanoutBenchmark(broker: .tally, mode: .records)
    /// Publishing time per path, shared among the rounds.
    public var seconds = 10.0
    public var rounds = 3

    public init(store: String) {
        self.store = store
    }

    public struct Row: Sendable {
        public var path: Path
        public var result: FanoutBenchmark.Result
    }

    public struct Outcome: Sendable {
        public var rows: [Row] = []
        public var failed = false
    }

    public func run(log: (String) -> Void, roundFailed: (String, FanoutBenchmark.Failure) -> Void) -> Outcome {
        var outcome = Outcome()
        var results: [Path: [FanoutBenchmark.Result]] = [:]
        var bench = template
        bench.seconds = seconds / Double(max(1, rounds))
        for round in 1...max(1, rounds) {
            for path in Path.allCases {
                bench.store = path == .sqlite ? nil : store
                bench.crossHub = path == .crossHub
                log("round \(round) of \(rounds): \(path.rawValue)")
                do {
                    results[path, default: []].append(try FanoutRounds.round(bench, log: log))
                } catch {
                    roundFailed("cross-hub \(path.rawValue)", error)
                    outcome.failed = true
                }
            }
        }
        for path in Path.allCases {
            guard let pooled = results[path].flatMap(FanoutBenchmark.pooled) else { continue }
            if pooled.delivered < pooled.expected { outcome.failed = true }
            outcome.rows.append(Row(path: path, result: pooled))
        }
        return outcome
    }
}

extension CrossHubBenchmark.Outcome {
    /// One row per path; the last two columns compare with the same hub
    /// on PostgreSQL (target across hubs: at most 1.3× the CPU, at most
    /// 5 ms more at p99).
    public var report: [[String]] {
        var table: [[String]] = [["path", "subscribers", "updates/s", "expected", "delivered", "p50 (ms)", "p99 (ms)",
                                  "max (ms)", "hub CPU (s)", "CPU/msg (µs)", "CPU ÷ same hub", "p99 − same hub (ms)"]]
        let same = rows.first { $0.path == .postgres }?.result
        for row in rows {
            let r = row.result
            var ratio = "", extra = ""
            if let same, row.path != .sqlite {
                ratio = format(r.cpuMicrosPerDelivery / same.cpuMicrosPerDelivery, 2) + "×"
                extra = format((r.latency.p99 - same.latency.p99) / 1000, 2)
            }
            table.append([row.path.rawValue, String(r.subscribers), String(r.rate), String(r.expected),
                          String(r.delivered), format(r.latency.p50 / 1000, 2), format(r.latency.p99 / 1000, 2),
                          format(r.latency.max / 1000, 1), format(r.brokerCPUSeconds, 2),
                          format(r.cpuMicrosPerDelivery, 2), ratio, extra])
        }
        return table
    }
}
