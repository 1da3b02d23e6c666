import TallyEngine
import TallyProtocol

/// The core's side of the intake analysis: it tells the analyzer of each
/// record this hub moved into `media-uploaded` once that move is committed,
/// and turns an analysis outcome into the move to `analyzed`.
extension HubCore {
    /// Who the hub's own analysis writes as (the history entry's `actor` is `hub`).
    static let analysisActor = Actor(user: "hub", role: "admin")

    /// Hands the analyzer an outcome, from any thread.
    func analyzed(_ outcome: IntakeAnalysisOutcome) {
        runner.post(.analyzed(outcome))
    }

    /// Queues an analysis job for each record `changes` (just accepted on
    /// this hub) moved into `media-uploaded` with a `photos` array (even an
    /// empty one; without one the job is not the hub's), to start once it is
    /// committed: a write that is rolled back or run again never reaches
    /// the analyzer (see `rollBackToCommitted`). Changes other hubs commit
    /// to a shared store do not pass here: the hub that wrote them analyses.
    func noteIntakeUploads(_ changes: [Change]) {
        for change in changes {
            guard case .record(let before, let after?, _) = change.target,
                  after.data["stage"]?.stringValue == IntakeAnalyzer.fromStage,
                  before?.data["stage"]?.stringValue != IntakeAnalyzer.fromStage,
                  let flow = configuration.planner.workflows.workflow(for: change.name),
                  IntakeAnalyzer.analyses(flow), let job = IntakeAnalysisJob(record: after) else { continue }
            emit(.analyze(job), after: change.seq)
        }
    }

    /// A held `.analyze` output whose write committed.
    func deliverAnalysisJob(_ job: IntakeAnalysisJob) {
        intakeAnalyzer?.enqueue(job)
    }

    /// media-uploaded → analyzed with the outcome's `analysis` (a write as
    /// any other: stage rules, history, stats, pushes), idempotently under
    /// `<record>/analyzed`. A record that moved on meanwhile (the CLI went
    /// on to cover-set, the job failed) keeps its stage: the outcome is
    /// dropped.
    func takeAnalyzed(_ outcome: IntakeAnalysisOutcome) {
        let name = outcome.job.name
        let record: RecordState?
        do { record = try cache.record(name) } catch {
            logger.warning("analysis.read_failed", ["record.name": name, "error": "\(error)"])
            return
        }
        guard let record, record.data["stage"]?.stringValue == IntakeAnalyzer.fromStage else {
            logger.debug("analysis.dropped", ["record.name": name, "reason": "no longer in media-uploaded"])
            return
        }
        let item = record.data["item"]?.stringValue
        var itemKeys: Set<String> = []
        if let item, item.hasPrefix(Self.itemPrefix), let itemRecord = try? cache.record(item) {
            itemKeys = Self.codes(of: itemRecord)
        }
        let settings = intakeAnalyzer?.settings ?? AnalysisSettings()
        let analysis = outcome.analysis(settings: settings, resolve: resolution(of:), item: item,
                                        itemKeys: itemKeys, key: Self.lookupKey)
        let advance = Advance(from: IntakeAnalyzer.fromStage, to: IntakeAnalyzer.toStage,
                              data: ["analysis": .object(analysis)])
        switch write([Write(name: name, action: .advance(advance))], atomic: false, key: "\(name)/analyzed",
                     actor: Self.analysisActor) {
        case .success(let result):
            fanOut(result.changes)
            logger.info("analysis.done", ["record.name": name, "status": outcome.status.rawValue,
                                          "codes": String(outcome.codes.count), "millis": String(outcome.millis)])
        case .failure(let error):
            logger.info("analysis.refused", ["record.name": name, "error": error.message])
        }
    }

    /// `/v1/resolve`'s answer for `code` (HubCore+Resolve.swift).
    private func resolution(of code: String) -> IntakeAnalysisOutcome.Resolution {
        if let record = try? item(withCode: Self.lookupKey(code)) {
            return .init(found: true, name: record.name)
        }
        return .init(found: false, name: Self.itemPrefix + Self.identifier(for: code))
    }
}
