/// The tables `tally bench` prints (`renderTable`), built from each
/// benchmark's result beside the benchmark, so the figures BENCHMARKS.md
/// quotes and the scripts read keep one layout. Nothing here writes.

extension EchoBenchmark {
    public func report(_ r: Result) -> [[String]] {
        [
            ["connections", "size (B)", "messages", "seconds", "msgs/s", "p50 (µs)", "p90 (µs)", "p99 (µs)", "max (µs)"],
            [String(connections), String(size), String(r.messages), format(r.seconds, 2),
             format(r.messagesPerSecond, 0), format(r.latency.p50), format(r.latency.p90),
             format(r.latency.p99), format(r.latency.max)],
        ]
    }
}

extension ConnectionsBenchmark.Result {
    public var report: [[String]] {
        let perConnection = bytesPerConnection.map { format($0 / 1024, 2) } ?? "n/a"
        return [
            ["connections", "failed", "open time (s)", "server RSS before (KiB)", "after (KiB)",
             "KiB per connection", "new connection (ms)", "echo (ms)"],
            [String(opened), String(failed), format(seconds, 2), rssBeforeKiB.map(String.init) ?? "n/a",
             rssAfterKiB.map(String.init) ?? "n/a", perConnection, format(newConnectionMillis, 2),
             echoMillis.map { format($0, 2) } ?? "n/a"],
        ]
    }
}

extension FanoutRounds.Outcome {
    public var report: [[String]] {
        var table: [[String]] = [["broker", "mode", "subscribers", "updates/s", "expected", "delivered", "loss %",
                                  "p50 (ms)", "p99 (ms)", "max (ms)", "idle CPU %", "broker CPU (s)", "CPU/msg (µs)",
                                  "Tally ÷ Mosquitto"]]
        for row in rows {
            let r = row.result
            table.append([r.broker.rawValue, r.mode.rawValue, String(r.subscribers), String(r.rate),
                          String(r.expected), String(r.delivered), format(r.lossPercent, 2),
                          format(r.latency.p50 / 1000, 2), format(r.latency.p99 / 1000, 2),
                          format(r.latency.max / 1000, 1), format(r.idleCPU * 100, 1), format(r.brokerCPUSeconds, 2),
                          format(r.cpuMicrosPerDelivery, 2), row.tallyOverMosquitto.map { format($0, 2) + "×" } ?? ""])
        }
        return table
    }
}

extension WriteBenchmark {
    public static let reportHeader = ["writers", "records", "store", "durability", "acked writes", "errors", "writes/s", "p50 (ms)",
                                      "p99 (ms)", "max (ms)", "hub CPU (s)", "CPU/write (µs)", "commits", "writes/commit",
                                      "mean commit (ms)"]

    /// This run's row under `reportHeader`.
    public func reportRow(_ r: Result) -> [String] {
        let perCommit = r.commits.map { $0 > 0 ? format(Double(r.acknowledged) / Double($0), 1) : "n/a" } ?? "n/a"
        let meanCommit = r.commits.flatMap { c in r.commitSeconds.map { c > 0 ? format($0 * 1000 / Double(c), 2) : "n/a" } } ?? "n/a"
        return [String(writers), records.map { "random of \($0)" } ?? "1000 per writer", storeLabel, durability,
                String(r.acknowledged), String(r.errors), format(r.writesPerSecond, 0),
                format(r.latency.p50 / 1000, 2), format(r.latency.p99 / 1000, 2),
                format(r.latency.max / 1000, 1), format(r.hubCPUSeconds, 2), format(r.cpuMicrosPerWrite, 1),
                r.commits.map(String.init) ?? "n/a", perCommit, meanCommit]
    }
}

extension BrokerStartupBenchmark {
    public func report(_ r: Result) -> [[String]] {
        let orders = kind == .orders
        var header = [orders ? "finished orders" : "records", "store size (MiB)", "fill time (s)",
                      orders ? "fill orders/s" : "fill records/s", "hub CPU filling (s)", "start",
                      "exec → listening (ms)", "exec → first get (ms)"]
        if orders { header.append("exec → first order (ms)") }
        header.append("RSS after get (MiB)")
        var rows: [[String]] = [header]
        for (i, s) in r.starts.enumerated() {
            var row = [i == 0 ? String(r.records) : "", i == 0 ? format(Double(r.storeBytes) / 1_048_576, 1) : "",
                       i == 0 ? format(r.fillSeconds, 1) : "", i == 0 ? format(Double(r.records) / r.fillSeconds, 0) : "",
                       i == 0 ? format(r.fillCPUSeconds, 1) : "", String(i + 1),
                       format(s.listeningSeconds * 1000, 1), format(s.firstGetSeconds * 1000, 1)]
            if orders { row.append(s.firstOrderSeconds.map { format($0 * 1000, 1) } ?? "n/a") }
            row.append(s.rssKiB.map { format(Double($0) / 1024, 1) } ?? "n/a")
            rows.append(row)
        }
        var median = ["", "", "", "", "", "median", format(r.medianListening * 1000, 1), format(r.medianFirstGet * 1000, 1)]
        if orders { median.append(r.medianFirstOrder.map { format($0 * 1000, 1) } ?? "n/a") }
        median.append("")
        rows.append(median)
        return rows
    }
}

extension SoakBenchmark.Result {
    /// Resident memory over time, then once the clients are gone.
    public var samplesReport: [[String]] {
        var rows: [[String]] = [["time (s)", "RSS (MiB)", "writes", "pushes", "resumes"]]
        for s in samples {
            let time = s.seconds == s.seconds.rounded() ? format(s.seconds, 0) : format(s.seconds, 1)
            rows.append([time, Self.mib(s.rssKiB), String(s.writes), String(s.pushes), String(s.resumes)])
        }
        rows.append(["clients gone", idleRSSKiB.map(Self.mib) ?? "n/a", "", "", ""])
        return rows
    }

    public var summaryReport: [[String]] {
        [
            ["RSS start (MiB)", "RSS half (MiB)", "RSS end (MiB)", "growth 2nd half (%)", "max RSS (MiB)", "writes/s",
             "pushes", "resumes", "hub CPU (s)", "errors"],
            [Self.mib(start.rssKiB), Self.mib(half.rssKiB), Self.mib(end.rssKiB), format(secondHalfGrowthPercent, 1),
             Self.mib(maxRSSKiB), format(writesPerSecond, 0), String(pushes), String(resumes),
             format(hubCPUSeconds, 1), String(errors)],
        ]
    }

    /// What went wrong: how often each kind (by name), then examples.
    public var problemLines: [String] {
        problems.counts.sorted(by: { $0.key < $1.key }).map { "\($0.value) × \($0.key)" } + problems.examples
    }

    static func mib(_ kib: Int) -> String { format(Double(kib) / 1024, 1) }
}

extension HistoryBenchmark {
    /// The rates per size, measure and connections; the fills; each rate
    /// at the largest size ÷ at the smallest against the target.
    public func report(_ r: Result) -> [[[String]]] {
        var rows: [[String]] = [["finished orders", "measure", "connections", "acknowledged", "errors", "seconds", "rate (/s)"]]
        for row in r.rows {
            rows.append([String(row.size), row.measure.rawValue, String(row.connections), String(row.acknowledged),
                         String(row.errors), format(row.seconds, 2), row.failed ? "failed" : format(row.rate, 0)])
        }
        var fills: [[String]] = [["size", "finished orders", "orders added", "fill time (s)", "orders/s"]]
        for fill in r.fills {
            fills.append([String(fill.size), String(fill.finished), String(fill.added), format(fill.seconds, 1),
                          format(fill.ordersPerSecond, 0)])
        }
        let sorted = sizes.sorted()
        let smallest = sorted.first.map(String.init) ?? "?", largest = sorted.last.map(String.init) ?? "?"
        var ratios: [[String]] = [["measure", "connections", "rate at \(smallest) (/s)", "rate at \(largest) (/s)",
                                   "ratio", "target", "met"]]
        for q in r.ratios {
            let known = q.smallest > 0 && q.largest > 0
            ratios.append([q.measure.rawValue, String(q.connections), q.smallest > 0 ? format(q.smallest, 0) : "failed",
                           q.largest > 0 ? format(q.largest, 0) : "failed", known ? format(q.ratio, 2) + "×" : "n/a",
                           "≥ " + format(HistoryBenchmark.target, 1) + "×", known ? (q.met ? "yes" : "no") : "n/a"])
        }
        return [rows, fills, ratios]
    }
}

extension HistoryBenchmark.Result {
    /// A line per row that could not be measured, with why.
    public var failedRowLines: [String] {
        rows.filter(\.failed).map {
            "\($0.size) orders, \($0.measure.rawValue), \($0.connections) connections failed: \($0.failure ?? "?")"
        }
    }

    /// The hub's CPU time per operation at the smallest and largest size
    /// and its growth: the steadier figure on a shared machine, kept out of
    /// the tables so their columns stay.
    public var cpuLines: [String] {
        ratios.compactMap { q in
            guard let small = q.smallestCPU, let large = q.largestCPU, let growth = q.cpuRatio else { return nil }
            return "hub CPU per op, \(q.measure.rawValue), \(q.connections) connections: \(format(small, 1)) → \(format(large, 1)) µs (\(format(growth, 2))×)"
        }
    }
}
