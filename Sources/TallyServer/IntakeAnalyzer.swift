@preconcurrency import Glibc
import TallyConcurrency
import TallyEngine
import TallyImaging
import TallyProtocol

/// One intake job to analyse: the record and the photos it reached
/// `media-uploaded` with.
struct IntakeAnalysisJob: Sendable, Equatable {
    var name: String
    var photos: [String]

    init(name: String, photos: [String]) {
        self.name = name
        self.photos = photos
    }

    /// The job a record in `media-uploaded` stands for (the strings among
    /// its `photos`); nil when it has no `photos` array: a job moved along
    /// by hand without photos is left to whoever moves it.
    init?(record: RecordState) {
        guard case .array(let list)? = record.data["photos"] else { return nil }
        name = record.name
        photos = list.compactMap(\.stringValue)
    }
}

/// What the analysis of one job found, handed to the core, which resolves
/// the codes and advances the record (IntakeAnalyzer+Core.swift).
struct IntakeAnalysisOutcome: Sendable {
    struct Photo: Sendable, Equatable {
        var sha256: String
        var codes: Int
        var millis: Int
        var error: String?
    }

    struct Code: Sendable, Equatable {
        var found: FoundCode
        var photo: String
    }

    enum Status: String, Sendable, CaseIterable {
        case done, failed, timeout, skipped
    }

    var job: IntakeAnalysisJob
    var status: Status
    var reason: String?
    var millis: Int
    var photos: [Photo] = []
    var codes: [Code] = []
    /// Label text lines; nil when OCR is off.
    var text: [String]?
}

/// Reads the codes (and, with `analysis.ocr`, the label text) in the photos
/// of intake jobs that reach `media-uploaded`, and has the core advance
/// each to `analyzed`.
///
/// Decoding a 12 MP photo and scanning it takes hundreds of milliseconds
/// to seconds of CPU, so it never runs on an event loop or the core: the
/// analyzer has its own threads (`analysis.workers`), each at nice 10, so
/// that the loops and the core win the CPU whenever both want it and the
/// fan-out latency stays where it is with an analysis running. Only the
/// last step — resolving the codes and the write — runs on the core, as an
/// input like any other (`HubCore.Input.analyzed`).
///
/// A job gets `analysis.timeout` from when a worker takes it: past it, a
/// watchdog thread hands the core what the worker had so far with status
/// "timeout", and the worker's own result, when it comes, is dropped (the
/// core's write would be refused anyway: it checks `from: "media-uploaded"`
/// and carries the idempotency key `<record>/analyzed`).
///
/// Jobs come from the core when a write of this hub that moved a record
/// into `media-uploaded` commits, and at start from a live query of the
/// records in that stage (a hub stopped or killed mid-analysis resumes
/// them; the key and the from-check make the advance happen once).
public final class IntakeAnalyzer: Sendable {
    let settings: AnalysisSettings
    private let core: HubCore
    private let blobs: BlobStore?
    private let state = ConditionLock(QueueState())

    /// The queue and the jobs being analysed, behind one lock.
    private struct QueueState {
        var queue = FIFO<IntakeAnalysisJob>()
        /// Jobs queued or running, by record name (each once).
        var known: Set<String> = []
        /// Jobs a worker has, with when it took them (monotonic ms) and
        /// what it found so far.
        var running: [String: Running] = [:]
        var started = false
        var stopping = false
        var threads = 0
        /// Analyses handed to the core, by status (`/metrics`).
        var ended: [IntakeAnalysisOutcome.Status: Int] = [:]
    }

    private struct Running {
        var job: IntakeAnalysisJob
        var startedAt: Int64
        var photos: [IntakeAnalysisOutcome.Photo] = []
        var codes: [IntakeAnalysisOutcome.Code] = []
        var text: [String]?
    }

    public init(core: HubCore, blobs: BlobStore?, settings: AnalysisSettings) {
        self.core = core
        self.blobs = blobs
        self.settings = settings
    }

    /// Starts the workers and the watchdog (none when analysis is off),
    /// then queues the records already waiting in `media-uploaded`.
    public func start() {
        let fresh = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && !state.stopping
        }
        guard fresh, settings.byHub else { return }
        if settings.enabled {
            for index in 0..<settings.workers { spawn { $0.work(index) } }
            spawn { $0.watch() }
        }
        requeueWaiting()
    }

    /// Stops taking jobs; idle threads end at once, a worker inside a photo
    /// when that photo is done. Nothing reaches the core after this returns.
    public func stop() {
        state.withLock { $0.stopping = true }
        state.broadcast()
    }

    /// Jobs queued or being analysed (tests, metrics).
    var pending: Int { state.withLock { $0.known.count } }

    /// The analysis gauge and counters for `/metrics`.
    var prometheusText: String {
        let (pending, ended) = state.withLock { ($0.known.count, $0.ended) }
        var text = "# HELP tally_intake_analysis_pending Intake jobs queued for photo analysis or being analysed.\n"
            + "# TYPE tally_intake_analysis_pending gauge\ntally_intake_analysis_pending \(pending)\n"
            + "# HELP tally_intake_analyses_total Analyses of intake jobs that ended, by status (each then advances its job to analyzed unless the job moved on).\n"
            + "# TYPE tally_intake_analyses_total counter\n"
        for status in IntakeAnalysisOutcome.Status.allCases {
            text += "tally_intake_analyses_total{status=\"\(status.rawValue)\"} \(ended[status] ?? 0)\n"
        }
        return text
    }

    /// Queues `job` unless it is queued or running already. With analysis
    /// off, the core advances it at once with status "skipped".
    func enqueue(_ job: IntakeAnalysisJob) {
        guard settings.byHub else { return }
        guard settings.enabled else {
            return state.withLock { state in
                guard !state.stopping else { return }
                state.ended[.skipped, default: 0] += 1
                core.analyzed(IntakeAnalysisOutcome(job: job, status: .skipped,
                                                    reason: "analysis is off in this hub's configuration (analysis.enabled)",
                                                    millis: 0))
            }
        }
        let queued = state.withLock { state -> Bool in
            guard !state.stopping, state.known.insert(job.name).inserted else { return false }
            state.queue.append(job)
            return true
        }
        if queued { state.broadcast() }
    }

    /// The records in `media-uploaded` of every workflow the analysis
    /// serves, read through the core (a live query on the stage index).
    private func requeueWaiting() {
        guard let stage = try? RecordPath(parsing: "stage") else { return }
        for flow in core.configuration.planner.workflows.workflows where Self.analyses(flow) {
            let query = Query(prefix: flow.prefix, conditions: [
                Query.Condition(path: stage, values: [JSONValue.string(Self.fromStage).serialized()]),
            ])
            core.query(query) { [self] records in
                for record in records {
                    if let job = IntakeAnalysisJob(record: record) { enqueue(job) }
                }
            }
        }
    }

    static let fromStage = "media-uploaded"
    static let toStage = "analyzed"

    /// Whether the analysis moves `flow`'s records: an intake workflow
    /// with the media-uploaded → analyzed transition.
    static func analyses(_ flow: Workflow) -> Bool {
        flow.kind == .intake && flow.allowed(from: fromStage).contains(toStage)
    }

    // MARK: Threads

    private final class Start {
        let analyzer: IntakeAnalyzer
        let body: @Sendable (IntakeAnalyzer) -> Void
        init(_ analyzer: IntakeAnalyzer, _ body: @escaping @Sendable (IntakeAnalyzer) -> Void) {
            self.analyzer = analyzer
            self.body = body
        }
    }

    /// A detached thread at nice 10 running `body`: a worker busy in a
    /// photo at shutdown finishes it on its own, without holding up the hub.
    private func spawn(_ body: @escaping @Sendable (IntakeAnalyzer) -> Void) {
        let box = Unmanaged.passRetained(Start(self, body))
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            // Linux keeps a nice value per thread (setpriority(2), NOTES):
            // this one alone yields to the loops and the core.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(threadID()), 10)
            start.body(start.analyzer)
            return nil
        }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            core.logger.error("analysis.thread_failed", ["errno": String(rc)])
            return
        }
        pthread_detach(thread)
        state.withLock { $0.threads += 1 }
    }

    /// A worker: takes jobs until the analyzer stops.
    private func work(_ index: Int) {
        var reader: TextReader?
        if settings.ocr {
            do { reader = try TextReader() } catch {
                core.logger.warning("analysis.ocr_unavailable", ["error": error.description])
            }
        }
        while let job = next() {
            // The watchdog learns of the new deadline.
            state.broadcast()
            analyze(job, text: reader)
        }
    }

    /// The next job, marked running; nil once stopping.
    private func next() -> IntakeAnalysisJob? {
        state.wait { state -> IntakeAnalysisJob?? in
            if state.stopping { return .some(nil) }
            guard let job = state.queue.popFirst() else { return nil }
            state.running[job.name] = Running(job: job, startedAt: PhotoAnalysis.now(),
                                              text: settings.ocr ? [] : nil)
            return .some(job)
        }
    }

    private func analyze(_ job: IntakeAnalysisJob, text reader: TextReader?) {
        let started = PhotoAnalysis.now()
        let deadline = started + Int64(settings.timeoutMillis)
        for sha in job.photos {
            let report = analyzePhoto(sha, deadline: deadline, text: reader)
            let current = state.withLock { state -> Bool in
                guard state.running[job.name] != nil else { return false }
                state.running[job.name]!.photos.append(.init(sha256: sha, codes: report.codes.count, millis: report.millis,
                                                             error: report.error))
                for code in report.codes where !state.running[job.name]!.codes.contains(where: { $0.found == code }) {
                    state.running[job.name]!.codes.append(.init(found: code, photo: sha))
                }
                if reader != nil { state.running[job.name]!.text!.append(contentsOf: report.lines) }
                return true
            }
            // The watchdog moved the job on: stop spending time on it.
            guard current else { return }
        }
        finish(job.name) { running in
            let millis = Int(PhotoAnalysis.now() - started)
            let unread = running.photos.filter { $0.error != nil }
            let failed = !running.photos.isEmpty && unread.count == running.photos.count && running.codes.isEmpty
            let first = unread.first.map { "\($0.sha256): \($0.error ?? "")" } ?? ""
            return IntakeAnalysisOutcome(job: job, status: failed ? .failed : .done,
                                         reason: failed ? "no photo could be read (\(first))" : nil,
                                         millis: millis, photos: running.photos, codes: running.codes, text: running.text)
        }
    }

    /// One photo, read from the blob store; a missing or unreadable blob is
    /// that photo's error.
    private func analyzePhoto(_ sha: String, deadline: Int64, text reader: TextReader?) -> PhotoReport {
        let bytes: [UInt8]
        do throws(BlobError) {
            guard let blobs, let found = try blobs.get(sha256: sha) else {
                return PhotoReport(error: "the photo is not in the hub's blob store")
            }
            bytes = found.bytes
        } catch {
            return PhotoReport(error: "the photo could not be read from the blob store: \(error)")
        }
        return PhotoAnalysis.analyze(bytes, deadline: deadline, text: reader)
    }

    /// Takes `name` off the running jobs and hands the core the outcome
    /// `make` builds from what was found; nothing when another thread
    /// (the watchdog, a stop) took it first.
    private func finish(_ name: String, _ make: (Running) -> IntakeAnalysisOutcome) {
        state.withLock { state in
            guard let running = state.running.removeValue(forKey: name) else { return }
            state.known.remove(name)
            // Under the lock: `stop()` returns only once no post can follow.
            guard !state.stopping else { return }
            let outcome = make(running)
            state.ended[outcome.status, default: 0] += 1
            core.analyzed(outcome)
        }
    }

    /// The watchdog: moves on the jobs whose time is up.
    private func watch() {
        let limit = Int64(settings.timeoutMillis)
        while true {
            let now = PhotoAnalysis.now()
            let wait = state.withLock { state -> Int? in
                if state.stopping { return nil }
                let earliest = state.running.values.map(\.startedAt).min().map { $0 + limit - now } ?? 1000
                return Int(max(1, min(earliest, 1000)))
            }
            guard let wait else { return }
            _ = state.wait(timeoutMillis: wait) { $0.stopping ? true : nil }
            let now2 = PhotoAnalysis.now()
            let expired = state.withLock { state in
                state.running.values.filter { now2 - $0.startedAt >= limit }.map(\.job.name)
            }
            for name in expired {
                finish(name) { running in
                    let done = running.photos.count
                    var photos = running.photos
                    for sha in running.job.photos.dropFirst(done) {
                        photos.append(.init(sha256: sha, codes: 0, millis: 0, error: "not analysed: the time limit passed first"))
                    }
                    return IntakeAnalysisOutcome(job: running.job, status: .timeout,
                                                 reason: "the time limit (analysis.timeout, \(Self.describe(millis: Int(limit)))) passed after \(done) of \(running.job.photos.count) photos",
                                                 millis: Int(now2 - running.startedAt), photos: photos,
                                                 codes: running.codes, text: running.text)
                }
            }
        }
    }

    static func describe(millis: Int) -> String {
        millis % 1000 == 0 ? "\(millis / 1000) s" : "\(millis) ms"
    }
}

/// glibc's gettid(2) (2.30 and later), which the Glibc module does not
/// import: the id setpriority takes to renice one thread.
@_silgen_name("gettid")
private func threadID() -> Int32
