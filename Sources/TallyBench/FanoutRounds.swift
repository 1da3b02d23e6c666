/// `tally bench fanout` as a whole: every mode and subscriber count measured
/// for each broker in turns. The brokers take turns `rounds` times, each
/// round a share of the publishing time, so both meet the same slow drifts
/// of a shared machine; each row pools its broker's rounds
/// (`FanoutBenchmark.pooled`).
public struct FanoutRounds: Sendable {
    /// What every run shares (rate, drain, threads, compression,
    /// durability); its broker, mode, subscribers and seconds are set per run.
    public var template: FanoutBenchmark
    public var modes: [FanoutBenchmark.Mode] = [.events]
    public var subscriberCounts = [100, 1000]
    public var brokers: [BrokerProcess.Kind] = [.tally, .mosquitto]
    /// Turns per broker, each `seconds / rounds` long with a fresh broker process.
    public var rounds = 3
    /// Publishing time per broker, shared among the rounds.
    public var seconds = 10.0

    public init(template: FanoutBenchmark) {
        self.template = template
    }

    /// One broker's pooled rounds at one mode and subscriber count.
    public struct Row: Sendable {
        public var result: FanoutBenchmark.Result
        /// Tally's CPU per delivered message ÷ Mosquitto's, on Tally's row
        /// when both ran.
        public var tallyOverMosquitto: Double?
    }

    public struct Outcome: Sendable {
        public var rows: [Row] = []
        /// Some round could not run (told to `roundFailed`).
        public var failed = false
    }

    /// Runs every round in turn. Progress and warnings about a round's load
    /// go to `log`; a round that could not run goes to `roundFailed` with
    /// what it was (`fanout tally events 100`) and leaves a gap in its row.
    public func run(log: (String) -> Void, roundFailed: (String, FanoutBenchmark.Failure) -> Void) -> Outcome {
        var outcome = Outcome()
        for mode in modes {
            for count in subscriberCounts {
                var byBroker: [BrokerProcess.Kind: [FanoutBenchmark.Result]] = [:]
                var bench = template
                bench.mode = mode
                bench.subscribers = count
                bench.seconds = seconds / Double(rounds)
                for round in 1...max(1, rounds) {
                    for broker in brokers {
                        bench.broker = broker
                        if rounds > 1 { log("round \(round) of \(rounds)") }
                        do {
                            byBroker[broker, default: []].append(try Self.round(bench, log: log))
                        } catch {
                            roundFailed("fanout \(bench.broker.rawValue) \(bench.mode.rawValue) \(bench.subscribers)", error)
                            outcome.failed = true
                        }
                    }
                }
                if rounds > 1, let t = byBroker[.tally], let m = byBroker[.mosquitto], t.count == m.count {
                    let ratios = zip(t, m).map { format($0.cpuMicrosPerDelivery / $1.cpuMicrosPerDelivery, 2) + "×" }
                    log("\(mode.rawValue), \(count) subscribers: Tally ÷ Mosquitto by round \(ratios.joined(separator: ", "))")
                }
                let results = brokers.compactMap { byBroker[$0].flatMap(FanoutBenchmark.pooled) }
                let mosquitto = results.first { $0.broker == .mosquitto }
                for r in results {
                    let ratio = r.broker == .tally ? mosquitto.map { r.cpuMicrosPerDelivery / $0.cpuMicrosPerDelivery } : nil
                    outcome.rows.append(Row(result: r, tallyOverMosquitto: ratio))
                }
            }
        }
        return outcome
    }

    /// One round, with warnings about its load.
    static func round(_ bench: FanoutBenchmark, log: (String) -> Void) throws(FanoutBenchmark.Failure) -> FanoutBenchmark.Result {
        let r = try bench.run(log: log)
        if r.publisherErrors > 0 || r.unparsed > 0 || r.droppedConnections > 0 {
            log("\(r.publisherErrors) publisher errors, \(r.unparsed) unparsed messages, \(r.droppedConnections) connections dropped by the broker")
        }
        if r.publishSeconds > bench.seconds * 1.05 + 0.1 {
            log("publishing took \(format(r.publishSeconds, 2)) s instead of \(format(bench.seconds, 2)) s (the publisher fell behind)")
        }
        return r
    }
}
