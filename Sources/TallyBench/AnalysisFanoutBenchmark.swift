@preconcurrency import Glibc
import COpenSSL
import Dispatch
import Synchronization
import TallyClient
import TallyConcurrency
import TallyImaging
import TallyProtocol

/// What a running photo analysis does to fan-out latency: one Tally hub
/// child, the fan-out benchmark's load (S subscribers, one publisher at U
/// updates/s) measured idle, then while a background client keeps the hub
/// analysing, in alternating rounds on the same hub; the p99 of each and
/// their ratio (target ≤ 1.2×: analysis runs off the event loops).
///
/// The background client does what `tally intake` does for a job with one
/// photo: PUT /v1/blobs/{sha256} of a 12 MP JPEG (each upload made unique by
/// a JPEG comment, so every one is stored and analysed anew), then the
/// intake record `intake/<id>` created, advanced queued → created →
/// media-uploaded with the photo. It keeps `inflight` records waiting for the
/// hub's analysis (stage `analyzed`), so the analysis never runs dry. Before
/// the rounds one such record probes the hub (and warms its analysis up); a
/// hub that does not move it to `analyzed` within `analysisWaitSeconds`
/// does not analyse, and then gets one upload and record a second: the
/// ratio measures upload load only, and the report says so.
public struct AnalysisFanoutBenchmark: Sendable {
    /// The fan-out load (broker, mode, subscribers, rate, drain); its
    /// seconds are set per round.
    public var template: FanoutBenchmark
    /// Publishing time per phase (idle, analysing), shared among the rounds.
    public var seconds = 20.0
    /// Idle/analysing pairs, all on one hub process.
    public var rounds = 2
    /// Distinct photos drawn (uploads cycle over them).
    public var photos = 4
    public var width = 4000
    public var height = 3000
    /// Records waiting for analysis at once.
    public var inflight = 2
    /// How long a record may wait in media-uploaded before the hub is taken
    /// not to analyse.
    public var analysisWaitSeconds = 30.0
    /// Extra `tally serve` arguments (`--config FILE` for the analysis settings).
    public var hubArguments: [String] = []
    public static let target = 1.2

    public init(template: FanoutBenchmark) {
        self.template = template
    }

    /// What the background client did while the analysing rounds ran.
    public struct LoadStats: Sendable {
        public var uploads = 0
        public var uploadBytes = 0
        public var uploadMillis: [Double] = []
        public var records = 0
        /// Records the hub moved to `analyzed`, by `analysis.status`.
        public var analyzed: [String: Int] = [:]
        /// `analysis.millis` of each analysed record.
        public var analysisMillis: [Double] = []
        /// Records not analysed within `analysisWaitSeconds`.
        public var unanalysed = 0
        public var errors: [String] = []
        public var analyzedCount: Int { analyzed.values.reduce(0, +) }

        mutating func add(_ other: LoadStats) {
            uploads += other.uploads
            uploadBytes += other.uploadBytes
            uploadMillis += other.uploadMillis
            records += other.records
            for (status, n) in other.analyzed { analyzed[status, default: 0] += n }
            analysisMillis += other.analysisMillis
            unanalysed += other.unanalysed
            errors += other.errors
        }
    }

    public struct Result: Sendable {
        public var idle: FanoutBenchmark.Result
        public var analysing: FanoutBenchmark.Result
        public var load: LoadStats
        /// Seconds the analysing phases lasted (load rates are per this).
        public var loadSeconds: Double
        /// Milliseconds the probe record took from upload to `analyzed`;
        /// nil when the hub did not analyse it (the load was uploads only).
        public var probeMillis: Double?
        public var ratio: Double { analysing.latency.p99 / idle.latency.p99 }
        public var met: Bool { ratio <= AnalysisFanoutBenchmark.target }
    }

    public enum Failure: Error, CustomStringConvertible {
        case drawing(ImageError)
        case hub(BrokerProcess.Failure)
        case round(String, FanoutBenchmark.Failure)
        public var description: String {
            switch self {
            case .drawing(let error): "making the photos failed: \(error)"
            case .hub(let failure): failure.description
            case .round(let which, let failure): "\(which): \(failure)"
            }
        }
    }

    public func run(log: (String) -> Void) throws(Failure) -> Result {
        log("drawing \(photos) \(width)×\(height) JPEG photos")
        var drawn: [[UInt8]] = []
        for index in 0..<photos {
            do {
                drawn.append(try PhotoDrawings.photo(width: width, height: height, seed: UInt64(index + 1), format: .jpeg))
            } catch { throw .drawing(error) }
        }
        let work = makeTemporaryDirectory("tally-analysis-fanout")
        defer { removeTree(work) }
        let hub: BrokerProcess
        do {
            hub = try .tally(dataDirectory: work + "/data", workDirectory: work,
                             extraArguments: ["--durability", template.durability] + hubArguments)
        } catch { throw .hub(error) }
        defer { hub.terminate() }
        log("hub pid \(hub.pid) on port \(hub.port); \(template.subscribers) subscribers, \(template.rate) updates/s, \(rounds) rounds")

        var bench = template
        bench.broker = .tally
        bench.hub = hub
        bench.seconds = seconds / Double(max(1, rounds))
        var idle: [FanoutBenchmark.Result] = [], busy: [FanoutBenchmark.Result] = []
        var stats = LoadStats()
        var loadSeconds = 0.0
        let runID = String(nanos() % 1_000_000_000, radix: 36)
        log("probing: one photo and record, waiting up to \(format(analysisWaitSeconds, 0)) s for its analysis")
        let probe = PhotoLoader(url: hub.url, photos: drawn, prefix: "intake/bench-\(runID)-probe-", inflight: 1,
                                waitSeconds: analysisWaitSeconds, analyses: true)
        let analyses = probe.probe()
        log(analyses.map { "the hub analyses: the probe took \(format($0, 0)) ms" }
            ?? "the hub did not analyse the probe: the load is uploads only")
        for round in 1...max(1, rounds) {
            log("round \(round) of \(rounds): idle")
            do { idle.append(try FanoutRounds.round(bench, log: log)) } catch { throw .round("idle round \(round)", error) }
            log("round \(round) of \(rounds): analysing")
            let loader = PhotoLoader(url: hub.url, photos: drawn, prefix: "intake/bench-\(runID)-\(round)-",
                                     inflight: inflight, waitSeconds: analysisWaitSeconds, analyses: analyses != nil)
            loader.start()
            // Let the first photo arrive and its analysis start before measuring.
            _ = waitUntil(seconds: 30) { loader.recordsSubmitted() > 0 }
            usleep(500_000)
            let started = nanos()
            let r: FanoutBenchmark.Result
            do { r = try FanoutRounds.round(bench, log: log) } catch {
                _ = loader.stop()
                throw .round("analysing round \(round)", error)
            }
            loadSeconds += Double(nanos() - started) / 1e9
            busy.append(r)
            let s = loader.stop()
            log("  \(s.uploads) uploads, \(s.records) records, \(s.analyzedCount) analysed, \(s.unanalysed) not analysed")
            stats.add(s)
        }
        guard let idlePooled = FanoutBenchmark.pooled(idle), let busyPooled = FanoutBenchmark.pooled(busy) else {
            throw .round("pooling", .connect("no rounds ran"))
        }
        return Result(idle: idlePooled, analysing: busyPooled, load: stats, loadSeconds: loadSeconds, probeMillis: analyses)
    }

    public func report(_ r: Result) -> [[[String]]] {
        var latency: [[String]] = [["phase", "subscribers", "updates/s", "delivered", "loss %", "p50 (ms)", "p99 (ms)",
                                    "max (ms)", "hub CPU (s)"]]
        for (phase, f) in [("idle", r.idle), ("analysing", r.analysing)] {
            latency.append([phase, String(f.subscribers), String(f.rate), String(f.delivered), format(f.lossPercent, 2),
                            format(f.latency.p50 / 1000, 2), format(f.latency.p99 / 1000, 2), format(f.latency.max / 1000, 1),
                            format(f.brokerCPUSeconds, 2)])
        }
        let ratio: [[String]] = [
            ["p99 idle (ms)", "p99 analysing (ms)", "ratio", "target", "met", "load"],
            [format(r.idle.latency.p99 / 1000, 2), format(r.analysing.latency.p99 / 1000, 2), format(r.ratio, 2) + "×",
             "≤ " + format(Self.target, 1) + "×", r.met ? "yes" : "no",
             r.probeMillis != nil ? "analysis" : "uploads only (the hub analysed nothing)"],
        ]
        let l = r.load
        let statuses = l.analyzed.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        let load: [[String]] = [
            ["uploads", "MiB uploaded", "upload p50 (ms)", "records", "analysed", "analysed/s", "analysis p50 (ms)",
             "analysis p95 (ms)", "not analysed", "errors"],
            [String(l.uploads), format(Double(l.uploadBytes) / 1_048_576, 0),
             format(AnalysisBenchmark.quantile(l.uploadMillis, 0.5), 0), String(l.records),
             l.analyzedCount > 0 ? "\(l.analyzedCount) (\(statuses))" : "0",
             format(Double(l.analyzedCount) / max(0.001, r.loadSeconds), 2),
             l.analysisMillis.isEmpty ? "n/a" : format(AnalysisBenchmark.quantile(l.analysisMillis, 0.5), 0),
             l.analysisMillis.isEmpty ? "n/a" : format(AnalysisBenchmark.quantile(l.analysisMillis, 0.95), 0),
             String(l.unanalysed), String(l.errors.count)],
        ]
        return [latency, ratio, load]
    }
}

/// The background client: uploads and intake records, one after another,
/// on its own thread, until stopped.
final class PhotoLoader: Sendable {
    let url: String
    let photos: [[UInt8]]
    let prefix: String
    let inflight: Int
    let waitSeconds: Double
    /// Whether the hub analyses (else: a record a second, not waited for).
    let analyses: Bool
    private let stopping = Atomic<Bool>(false)
    private let submitted = Atomic<Int>(0)
    private let done = DispatchSemaphore(value: 0)
    private let stats = LockedValueBox(AnalysisFanoutBenchmark.LoadStats())

    init(url: String, photos: [[UInt8]], prefix: String, inflight: Int, waitSeconds: Double, analyses: Bool) {
        self.analyses = analyses
        self.url = url
        self.photos = photos
        self.prefix = prefix
        self.inflight = max(1, inflight)
        self.waitSeconds = waitSeconds
    }

    func recordsSubmitted() -> Int { submitted.load(ordering: .relaxed) }

    func start() {
        DispatchQueue(label: "tally-bench-photo-loader").async { [self] in
            loop()
            done.signal()
        }
    }

    /// Stops after the request in hand and returns what was done.
    func stop() -> AnalysisFanoutBenchmark.LoadStats {
        stopping.store(true, ordering: .relaxed)
        done.wait()
        return stats.withLock { $0 }
    }

    private func fail(_ message: String) {
        stats.withLock { if $0.errors.count < 20 { $0.errors.append(message) } }
        usleep(200_000)
    }

    private func connect() -> (RESTClient, BlockingTallyClient)? {
        let access = HubAccess(server: url)
        do { return (RESTClient(access: access), try BlockingTallyClient(access: access, clientName: "tally-bench")) } catch {
            fail("connecting: \(error)")
            return nil
        }
    }

    /// One record, waited for: the milliseconds until the hub moved it on
    /// from media-uploaded, or nil when it did not within `waitSeconds`.
    func probe() -> Double? {
        guard let (http, client) = connect() else { return nil }
        defer { client.close() }
        let started = nanos()
        guard let name = submit(number: 0, http: http, client: client) else { return nil }
        while Double(nanos() - started) / 1e9 < waitSeconds {
            if let reply = try? client.request(["op": "get", "name": .string(name)]),
               let stage = reply["data"]?["stage"]?.stringValue, stage != "media-uploaded" {
                return Double(nanos() - started) / 1e6
            }
            usleep(50_000)
        }
        return nil
    }

    private func loop() {
        guard let (http, client) = connect() else { return }
        defer { client.close() }
        /// Records in media-uploaded, with when they got there.
        var pending: [(name: String, since: UInt64)] = []
        var next = 0
        var lastSubmit: UInt64 = 0, lastPoll: UInt64 = 0
        while !stopping.load(ordering: .relaxed) {
            // Collect what the hub finished (5 polls a second: the gets are
            // load on the loops too, kept small).
            let poll = nanos() - lastPoll >= 200_000_000
            if poll { lastPoll = nanos() }
            pending = !poll ? pending : pending.filter { record in
                guard let reply = try? client.request(["op": "get", "name": .string(record.name)]),
                      let data = reply["data"]?.objectValue else { return true }
                let stage = data["stage"]?.stringValue ?? ""
                if stage == "media-uploaded" {
                    if Double(nanos() - record.since) / 1e9 < waitSeconds { return true }
                    stats.withLock { $0.unanalysed += 1 }
                    return false
                }
                let analysis = data["analysis"]?.objectValue
                stats.withLock {
                    $0.analyzed[analysis?["status"]?.stringValue ?? "stage \(stage)", default: 0] += 1
                    if let millis = analysis?["millis"]?.numberValue?.doubleValue { $0.analysisMillis.append(millis) }
                }
                return false
            }
            // Room for another: while fewer than `inflight` wait for their
            // analysis; one a second when the hub does not analyse.
            let ready = analyses ? pending.count < inflight : Double(nanos() - lastSubmit) / 1e9 >= 1
            guard ready else {
                usleep(analyses ? 20_000 : 50_000)
                continue
            }
            lastSubmit = nanos()
            if let name = submit(number: next, http: http, client: client) {
                if analyses { pending.append((name, nanos())) }
                submitted.add(1, ordering: .relaxed)
            }
            next += 1
        }
        // What is still waiting is neither analysed nor not: left out.
    }

    /// One photo stored and one record advanced to media-uploaded with it;
    /// the record's name, or nil after a failure (noted).
    private func submit(number: Int, http: RESTClient, client: BlockingTallyClient) -> String? {
        let base = photos[number % photos.count]
        // A JPEG comment segment (FF FE) after SOI makes each upload new.
        let comment = Array("tally bench \(prefix)\(number)".utf8)
        let length = comment.count + 2
        let bytes = Array(base[..<2]) + [0xFF, 0xFE, UInt8(length >> 8), UInt8(length & 0xFF)] + comment + Array(base[2...])
        let sha = Self.sha256Hex(bytes)
        let started = nanos()
        do {
            let response = try http.put("/v1/blobs/\(sha)", body: .bytes(bytes), headers: [("Content-Type", "image/jpeg")])
            guard response.status == 200 || response.status == 201 else {
                fail("upload: HTTP \(response.status): \(response.refusal)")
                return nil
            }
        } catch {
            fail("upload: \(error)")
            return nil
        }
        stats.withLock {
            $0.uploads += 1
            $0.uploadBytes += bytes.count
            $0.uploadMillis.append(Double(nanos() - started) / 1e6)
        }
        let name = "\(prefix)\(number)"
        let steps: [JSONObject] = [
            WriteOperation.set(name, data: ["item": .null, "expectedPhotos": 1], version: 0).json,
            WriteOperation.advance(name, from: "queued", to: "created").json,
            WriteOperation.advance(name, from: "created", to: "media-uploaded", data: ["photos": [.string(sha)]]).json,
        ]
        for step in steps {
            do { _ = try client.request(step) } catch {
                fail("\(step["op"]?.stringValue ?? "write") \(name): \(error)")
                return nil
            }
        }
        stats.withLock { $0.records += 1 }
        return name
    }

    static func sha256Hex(_ bytes: [UInt8]) -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                _ = SHA256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        let hex = Array("0123456789abcdef".utf8)
        return String(decoding: digest.flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 15)]] }, as: UTF8.self)
    }
}
