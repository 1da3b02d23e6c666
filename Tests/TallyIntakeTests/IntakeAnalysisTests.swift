@preconcurrency import Glibc
import Testing
import TallyClient
import TallyIntake
import TallyProtocol
import TallyTestSupport

/// The analyzed stage (issue 18): the runner waits for the hub to advance
/// the record media-uploaded → analyzed, then covers from there; and
/// `IntakeAccept` takes the proposals. This hub analyses nothing by itself:
/// `simulateAnalysis` writes what the hub's analyser writes once it is there.
@Suite("IntakeAnalysis", .serialized)
struct IntakeAnalysisTests {
    static let analysis: JSONObject = [
        "status": "done", "millis": 812,
        "photos": [["sha256": "ab", "codes": 2, "millis": 300]],
        "codes": [
            ["code": "SN-4711", "symbology": "QR-Code", "photo": "ab", "found": false, "name": "items/SN-4711"],
            ["code": "4006381333931", "symbology": "EAN-13", "photo": "ab", "found": true, "name": "items/tin"],
        ],
        "proposals": ["serials": ["SN-4711"], "codes": ["4006381333931"], "name": "Drill"],
    ]
    static let summary = "analysed: 2 codes (QR-Code SN-4711 → items/SN-4711 (new), EAN-13 4006381333931 → items/tin), "
        + "proposals: serials SN-4711; codes 4006381333931; name \"Drill\""

    func history(_ fixture: IntakeFixture, _ job: IntakeJob) throws -> [String] {
        let record = try #require(try fixture.record(job.record))
        return record["data"]?["history"]?.arrayValue?.compactMap { $0["to"]?.stringValue } ?? []
    }

    /// A job run to the end while the hub analyses as soon as the runner waits.
    func analysedJob(_ fixture: IntakeFixture, code: String = "SKU-A", analysis: JSONObject = Self.analysis) throws -> IntakeJob {
        var job = try fixture.newJob(code: code, photos: 2)
        let runner = fixture.runner(analysisWait: 20_000)
        let record = job.record
        runner.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "analyzed:waiting" { _ = try? fixture.simulateAnalysis(record, analysis: analysis) }
        }
        guard case .done = try runner.run(&job) else { throw TestFailure("the job did not finish") }
        return job
    }

    @Test func theRunnerWaitsForTheAnalysisAndCoversFromAnalyzed() throws {
        let fixture = try IntakeFixture()
        var lines: [String] = []
        var events: [PhotoUploadEvent] = []
        var job = try fixture.newJob(code: "SKU-A", photos: 2)
        let runner = fixture.runner(analysisWait: 20_000)
        let record = job.record
        runner.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "analyzed:waiting" { _ = try? fixture.simulateAnalysis(record, analysis: Self.analysis) }
        }
        runner.log = { lines.append($0) }
        runner.onUpload = { events.append($0) }
        let start = PhotoUploadDisplay.monotonicMillis()
        guard case .done = try runner.run(&job) else { Issue.record("the job did not finish"); return }
        #expect(PhotoUploadDisplay.monotonicMillis() - start < 10_000)
        #expect(try history(fixture, job) == ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"])
        #expect(job.status(of: .analyzed) == .confirmed)
        #expect(job.analysis?.proposals.serials == ["SN-4711"])
        #expect(job.coverSetFrom == "analyzed")
        #expect(lines.contains(Self.summary))
        #expect(events.contains(.analysing(photos: 2, waited: 0)) && events.last == .analysisEnded)
        // The outbox has it for `status` and `--json`.
        let stored = try #require(try fixture.outbox.jobs(id: job.id).first)
        #expect(stored.analysis?.codes.map(\.code) == ["SN-4711", "4006381333931"])
        #expect(stored.json["analysis"]?["proposals"]?["name"] == "Drill")
        #expect(stored.statusLines.contains("    proposals: serials SN-4711; codes 4006381333931; name \"Drill\""))
        #expect(stored.statusLines.contains("    not accepted: 'tally intake accept \(job.id)' writes them on the item"))
    }

    @Test func whenTheWaitRunsOutTheJobCoversFromMediaUploaded() throws {
        let fixture = try IntakeFixture()
        var lines: [String] = []
        var job = try fixture.newJob(photos: 1)
        let runner = fixture.runner(analysisWait: 300)
        runner.log = { lines.append($0) }
        guard case .done = try runner.run(&job) else { Issue.record("the job did not finish"); return }
        #expect(try history(fixture, job) == ["queued", "created", "media-uploaded", "cover-set", "done"])
        #expect(job.analysis == nil && job.coverSetFrom == "media-uploaded")
        #expect(job.stages.first { $0.stage == .analyzed }?.result?["timeout"] == .bool(true))
        #expect(lines.contains("analysed: the hub did not analyse the photos within 0.3 s; going on without it"))
        // The hub's late advance is refused by its from-check.
        do {
            try fixture.simulateAnalysis(job.record, analysis: Self.analysis)
            Issue.record("the late advance was applied")
        } catch let error as HubError {
            #expect(error.code == "conflict")
        }
        let stored = try #require(try fixture.outbox.jobs(id: job.id).first)
        #expect(stored.statusLines.contains { $0.hasPrefix("  analyzed  confirmed no analysis within") })
    }

    /// Killed while waiting; the hub analyses meanwhile; resumed, the job
    /// continues from analyzed, each stage once.
    @Test func aJobStoppedWhileWaitingResumesFromAnalyzed() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(code: "SKU-K", photos: 2)
        let first = fixture.runner(analysisWait: 20_000)
        first.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "analyzed:waiting" { throw IntakeRunner.Interruption() }
        }
        guard case .interrupted = try first.run(&job) else { Issue.record("the run did not stop"); return }
        var stored = try #require(try fixture.outbox.jobs(id: job.id).first)
        #expect(stored.nextStage == .analyzed)
        try fixture.simulateAnalysis(job.record, analysis: Self.analysis)
        let second = fixture.runner(analysisWait: 20_000)
        var lines: [String] = []
        second.log = { lines.append($0) }
        guard case .done = try second.run(&stored) else { Issue.record("the resumed job did not finish"); return }
        #expect(lines.first == Self.summary)
        #expect(try history(fixture, stored) == ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"])
        #expect(stored.coverSetFrom == "analyzed")
    }

    /// The wait ran out, then the hub analysed before the runner's advance:
    /// media-uploaded → cover-set is refused, and the runner takes the
    /// analysis and covers from analyzed.
    @Test func anAnalysisLandingAfterTheWaitIsTakenAtCoverSet() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(photos: 1)
        let runner = fixture.runner(analysisWait: 50)
        let record = job.record
        runner.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "analyzed:confirmed" { _ = try? fixture.simulateAnalysis(record, analysis: Self.analysis) }
        }
        var lines: [String] = []
        runner.log = { lines.append($0) }
        guard case .done = try runner.run(&job) else { Issue.record("the job did not finish"); return }
        #expect(try history(fixture, job) == ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"])
        #expect(job.analysis != nil && job.coverSetFrom == "analyzed")
        #expect(lines.contains(Self.summary + " (after the wait)"))
    }

    // MARK: accept

    @Test func acceptWritesTheProposalsOnceAndRefusesASecondTime() throws {
        let fixture = try IntakeFixture()
        let job = try analysedJob(fixture, code: "SKU-B")
        let done = try IntakeAccept.run(access: fixture.access, record: job.record, time: { 1_700_000_000_000 })
        #expect(done.item == "items/SKU-B" && done.serials == ["SN-4711"] && done.codes == ["4006381333931"])
        #expect(done.line == "accepted: serials SN-4711; codes 4006381333931; name \"Drill\" → items/SKU-B")
        let item = try #require(try fixture.record("items/SKU-B"))
        #expect(item["data"]?["serials"] == ["SN-4711"])
        #expect(item["data"]?["codes"] == ["SKU-B", "4006381333931"])
        #expect(item["data"]?["name"] == "Drill")
        let record = try #require(try fixture.record(job.record))
        #expect(record["data"]?["analysis"]?["accepted"] == ["by": "anonymous", "time": 1_700_000_000_000])
        #expect(record["data"]?["analysis"]?["proposals"]?["serials"] == ["SN-4711"])
        let version = item["version"]
        #expect(throws: IntakeAcceptRefusal.alreadyAccepted(record: job.record, by: "anonymous", time: 1_700_000_000_000)) {
            _ = try IntakeAccept.run(access: fixture.access, record: job.record)
        }
        #expect(try fixture.record("items/SKU-B")?["version"] == version)
        // The outbox's copy shows it accepted.
        try fixture.outbox.recordAccepted(jobID: job.id, accepted: done.accepted)
        let stored = try #require(try fixture.outbox.jobs(id: job.id).first)
        #expect(stored.statusLines.contains("    accepted by anonymous at 2023-11-14T22:13:20Z"))
    }

    @Test func acceptRefusesAJobWithoutAnalysisOrProposals() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(photos: 1)
        guard case .done = try fixture.runner(analysisWait: 50).run(&job) else { Issue.record("not done"); return }
        #expect(throws: IntakeAcceptRefusal.noAnalysis(record: job.record, stage: "done")) {
            _ = try IntakeAccept.run(access: fixture.access, record: job.record)
        }
        #expect(throws: IntakeAcceptRefusal.noRecord("intake/none")) {
            _ = try IntakeAccept.run(access: fixture.access, record: "intake/none")
        }
        var empty = Self.analysis
        empty["proposals"] = ["serials": [], "codes": []]
        let quiet = try analysedJob(fixture, code: "SKU-E", analysis: empty)
        #expect(throws: IntakeAcceptRefusal.nothingToAccept(record: quiet.record,
                                                           why: "the analysis (done) proposes no serial, code or name")) {
            _ = try IntakeAccept.run(access: fixture.access, record: quiet.record)
        }
        #expect(try fixture.record(quiet.record)?["data"]?["analysis"]?["accepted"] == nil)
    }

    /// The plan alone: the owner rule, unions keeping order, nothing new.
    @Test func planChecksTheOwnerAndMergesAsUnions() throws {
        let record: JSONObject = ["name": "intake/j1", "version": 7, "data": [
            "stage": "analyzed", "owner": "alice", "item": "items/x",
            "analysis": ["status": "done", "proposals": ["serials": ["S2", "S1", "S2"], "codes": ["C1"]]],
        ]]
        let item: JSONObject = ["name": "items/x", "version": 3, "data": ["name": "X", "serials": ["S1"], "codes": ["C0"]]]
        #expect(throws: IntakeAcceptRefusal.notOwner(record: "intake/j1", owner: "alice", user: "bob")) {
            _ = try IntakeAccept.plan(record: record, item: item, user: "bob", time: 5)
        }
        let (request, done) = try IntakeAccept.plan(record: record, item: item, user: "alice", time: 5)
        #expect(done.serials == ["S2"] && done.codes == ["C1"] && done.name == nil)
        #expect(request.message == [
            "op": "write", "idem": "intake/j1/accept", "ops": [
                ["op": "merge", "name": "items/x", "version": 3, "data": ["serials": ["S1", "S2"], "codes": ["C0", "C1"]]],
                ["op": "merge", "name": "intake/j1", "version": 7,
                 "data": ["analysis": ["accepted": ["by": "alice", "time": 5]]]],
            ],
        ])
        let have: JSONObject = ["name": "items/x", "version": 4, "data": ["serials": ["S1", "S2"], "codes": ["C1"]]]
        #expect(throws: IntakeAcceptRefusal.nothingToAccept(record: "intake/j1",
                                                           why: "items/x already has every proposed serial, code and name")) {
            _ = try IntakeAccept.plan(record: record, item: have, user: nil, time: 5)
        }
    }

    @Test func theDisplayDrawsTheWait() {
        var terminal: [String] = []
        let bar = PhotoUploadDisplay(terminal: true) { terminal.append($0) }
        bar.show(.analysing(photos: 3, waited: 0))
        bar.show(.analysing(photos: 3, waited: 2100))
        bar.show(.analysisEnded)
        #expect(terminal == ["\ranalysing 3 photos… 0s\u{1B}[K", "\ranalysing 3 photos… 2s\u{1B}[K", "\r\u{1B}[K"])
        var log: [String] = []
        let lines = PhotoUploadDisplay(terminal: false) { log.append($0) }
        lines.show(.analysing(photos: 1, waited: 0))
        lines.show(.analysing(photos: 1, waited: 1000))
        lines.show(.analysisEnded)
        #expect(log == ["tally: analysing 1 photo…\n"])
    }

    @Test func summaryOfAnAnalysisThatDidNotFinish() throws {
        let failed = try #require(IntakeAnalysis(.object(["status": "timeout", "reason": "30 s passed",
                                                          "proposals": ["serials": [], "codes": []]])))
        #expect(failed.summaryLine == "analysed: timeout (30 s passed), proposals: none")
        #expect(failed.statusLines(job: "j") == ["  analysis: timeout (30 s passed)", "    proposals: none"])
    }
}
