@preconcurrency import Glibc
import Testing
import TallyClient
import TallyHubTestSupport
import TallyIntake
import TallyProtocol
import TallyTestSupport

/// An intake outbox in a temporary directory, photos written beside it, and
/// a hub in this process to run jobs against.
final class IntakeFixture {
    let directory: TemporaryDirectory
    let hub: RestartableHub
    let outbox: IntakeOutbox

    init() throws {
        directory = try TemporaryDirectory(prefix: "intake-test")
        // The tests play the hub's analyser (`simulateAnalysis`).
        hub = try RestartableHub.temporary(prefix: "intake-hub") { $0.analysis.byHub = false }
        outbox = try IntakeOutbox(path: "\(directory.path)/outbox.sqlite")
    }

    var access: HubAccess { HubAccess(server: hub.url) }

    /// A PNG signature and `seed`-dependent bytes: a photo the hub's blob
    /// store takes as image/png.
    func photo(_ seed: Int, bytes: Int = 3000) throws -> IntakePhotos.Checked {
        let path = "\(directory.path)/photo-\(seed).png"
        var data: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        data += (0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw TestFailure("cannot write \(path)") }
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        return try IntakePhotos.check(path)
    }

    func newJob(code: String? = nil, photos: Int = 2, receive: Int? = nil) throws -> IntakeJob {
        let checked = try (0..<photos).map { try photo($0) }
        let (job, lock) = try outbox.createJob(hub: access.httpBase, photos: checked, code: code, location: "shelf 4",
                                               gps: nil, receive: receive)
        lock.release()
        return job
    }

    /// A runner for this hub that waits `analysisWait` ms for an analysis
    /// (this hub analyses nothing by itself: tests that want one write it,
    /// as `simulateAnalysis` does).
    func runner(analysisWait: Int64 = 50) -> IntakeRunner {
        let runner = IntakeRunner(outbox: outbox, access: access)
        runner.analysisWaitMillis = analysisWait
        return runner
    }

    /// What the hub does once it has analysed a job's photos (issue 18):
    /// media-uploaded → analyzed with the analysis, under its key.
    @discardableResult
    func simulateAnalysis(_ record: String, analysis: JSONObject) throws -> JSONObject {
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        let id = record.dropFirst("intake/".count)
        return try client.request(["op": "advance", "name": .string(record), "from": "media-uploaded", "to": "analyzed",
                                   "data": ["analysis": .object(analysis)], "idem": .string("intake/\(id)/analyzed")])
    }

    /// A fresh read of a record on the hub.
    func record(_ name: String) throws -> JSONObject? {
        let client = try BlockingTallyClient(access: access)
        defer { client.close() }
        do {
            return try client.request(["op": "get", "name": .string(name)])
        } catch where error.code == "not_found" {
            return nil
        }
    }
}

@Suite("IntakeRunner", .serialized)
struct IntakeRunnerTests {
    static let stages = ["queued", "created", "media-uploaded", "cover-set", "done"]

    /// The hub's record and item after a job, checked to have happened once.
    func expectDoneOnce(_ fixture: IntakeFixture, _ job: IntakeJob, stock: Int, photos: Int,
                        sourceLocation: SourceLocation = #_sourceLocation) throws {
        let record = try #require(try fixture.record(job.record), sourceLocation: sourceLocation)
        let history = record["data"]?["history"]?.arrayValue?.compactMap { $0["to"]?.stringValue } ?? []
        // With or without the hub's analysis (a hub that analyses puts
        // analyzed between media-uploaded and cover-set).
        #expect(history.filter { $0 != "analyzed" } == Self.stages, sourceLocation: sourceLocation)
        #expect(history.filter { $0 == "analyzed" }.count <= 1, sourceLocation: sourceLocation)
        let itemName = try #require(job.item, sourceLocation: sourceLocation)
        let item = try #require(try fixture.record(itemName), sourceLocation: sourceLocation)
        #expect(item["data"]?["stock"] == .int(Int64(stock)), sourceLocation: sourceLocation)
        #expect(item["data"]?["photos"]?.arrayValue?.count == photos, sourceLocation: sourceLocation)
        #expect(item["data"]?["cover"]?.stringValue == job.photos.first?.sha256, sourceLocation: sourceLocation)
        let stored = try #require(try fixture.outbox.jobs(id: job.id).first, sourceLocation: sourceLocation)
        #expect(stored.state == .done && stored.stages.allSatisfy { $0.status == .confirmed },
                sourceLocation: sourceLocation)
    }

    @Test func aJobRunsEveryStage() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(code: "SKU-1", receive: 3)
        let runner = fixture.runner()
        var lines: [String] = []
        runner.log = { lines.append($0) }
        guard case .done = try runner.run(&job) else { Issue.record("the job did not finish"); return }
        try expectDoneOnce(fixture, job, stock: 3, photos: 2)
        #expect(lines.first == "resolve: SKU-1 → items/SKU-1 (new item)")
        #expect(lines.last == "done: \(job.record), received 3 into items/SKU-1")
    }

    /// Every point a crash can leave a job at: stop there, then resume with a
    /// new runner from what the outbox holds; each stage applies once.
    @Test(arguments: ["resolve:sent", "resolve:confirmed", "create:sent", "create:confirmed", "created:sent",
                      "created:confirmed", "upload:1", "upload:2", "upload:sent", "upload:confirmed",
                      "analyzed:waiting", "analyzed:confirmed", "cover-set:sent", "cover-set:confirmed", "done:sent"])
    func resumesAfterAFailureAt(point: String) throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(code: "CODE-\(point)", receive: 2)
        let first = fixture.runner()
        first.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == point { throw IntakeRunner.Interruption() }
        }
        guard case .interrupted = try first.run(&job) else {
            Issue.record("the run did not stop at \(point)")
            return
        }
        var stored = try #require(try fixture.outbox.jobs(id: job.id).first)
        #expect(stored.state == .running)
        let second = fixture.runner()
        guard case .done = try second.run(&stored) else { Issue.record("the resumed job did not finish"); return }
        try expectDoneOnce(fixture, stored, stock: 2, photos: 2)
    }

    /// A stage whose outbox row was lost after the hub applied it (its
    /// idempotency key expired): the runner sees the record already there.
    @Test func aStageAppliedWithoutItsKeyIsRecognised() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(receive: 1)
        let runner = fixture.runner()
        runner.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "create:confirmed" { throw IntakeRunner.Interruption() }
        }
        guard case .interrupted = try runner.run(&job) else { Issue.record("no stop"); return }
        // The stage applied under another key (as if its own had expired):
        // the hub cannot answer the runner's send from its idempotency record.
        let client = try BlockingTallyClient(access: fixture.access)
        defer { client.close() }
        var request = IntakeRequests.created(job)
        request.idem = "an-expired-key"
        _ = try client.request(request.message)
        var lines: [String] = []
        let resumed = fixture.runner()
        resumed.log = { lines.append($0) }
        guard case .done = try resumed.run(&job) else { Issue.record("not done"); return }
        #expect(lines.contains("created: \(job.record) is already created"))
        try expectDoneOnce(fixture, job, stock: 1, photos: 2)
    }

    /// Sent twice with its idempotency key, a stage applies once and the
    /// second send gets the first reply.
    @Test func aStageSentTwiceAppliesOnce() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(photos: 1, receive: 5)
        let runner = fixture.runner()
        runner.checkpoint = { (name) throws(IntakeRunner.Interruption) in
            if name == "cover-set:confirmed" { throw IntakeRunner.Interruption() }
        }
        guard case .interrupted = try runner.run(&job) else { Issue.record("no stop"); return }
        let client = try BlockingTallyClient(access: fixture.access)
        defer { client.close() }
        let done = IntakeRequests.done(job)
        let once = try client.request(done.message)
        let twice = try client.request(done.message)
        #expect(once["seq"] == twice["seq"])
        #expect(once["results"] == twice["results"])
        let itemName = try #require(job.item)
        let item = try #require(try fixture.record(itemName))
        #expect(item["data"]?["stock"] == .int(5))
    }

    @Test func aRefusalFailsTheJobAndMarksTheRecordFailed() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(photos: 1)
        // A photo the outbox lost cannot be sent again: no retry fixes that.
        unlink(fixture.outbox.photoPath(job.photos[0].sha256))
        let runner = fixture.runner()
        guard case .failed(let reason) = try runner.run(&job) else { Issue.record("not failed"); return }
        #expect(reason.contains("is missing from the outbox"))
        #expect(job.state == .failed && job.status(of: .upload) == .failed)
        let record = try #require(try fixture.record(job.record))
        #expect(record["data"]?["stage"] == "failed")
    }

    @Test func anUnreachableHubLeavesTheJobResumable() throws {
        let fixture = try IntakeFixture()
        var job = try fixture.newJob(photos: 1)
        fixture.hub.stop()
        let runner = fixture.runner()
        guard case .interrupted(.unreachable) = try runner.run(&job) else { Issue.record("not interrupted"); return }
        #expect(try fixture.outbox.jobs(id: job.id).first?.state == .running)
        try fixture.hub.start()
        guard case .done = try runner.run(&job) else { Issue.record("not done after the hub came back"); return }
    }

    /// Several jobs: a busy one is skipped, an interrupted one ends the run
    /// (the next would meet the same network), the rest resume later.
    @Test func aRunOfJobsSkipsBusyOnesAndStopsAtTheFirstInterruption() throws {
        let fixture = try IntakeFixture()
        let jobs = try (0..<3).map { _ in try fixture.newJob(photos: 1) }
        let busy = try #require(try fixture.outbox.lockJob(jobs[0].id))
        fixture.hub.stop()
        let runner = fixture.runner()
        var events: [String] = []
        func note(_ event: IntakeRunner.JobEvent) {
            switch event {
            case .busy(let job): events.append("busy \(job.id)")
            case .starting(let job): events.append("starting \(job.id)")
            case .ran(let job, .done): events.append("done \(job.id)")
            case .ran(let job, .interrupted): events.append("interrupted \(job.id)")
            case .ran(let job, .failed): events.append("failed \(job.id)")
            }
        }
        try runner.run(jobs) { note($0) }
        #expect(events == ["busy \(jobs[0].id)", "starting \(jobs[1].id)", "interrupted \(jobs[1].id)"])
        busy.release()
        try fixture.hub.start()
        events = []
        try runner.run(jobs) { note($0) }
        #expect(events == jobs.flatMap { ["starting \($0.id)", "done \($0.id)"] })
        #expect(try fixture.outbox.jobs().allSatisfy { $0.state == .done })
    }
}

@Suite("IntakeRequests")
struct IntakeRequestsTests {
    func job(code: String?, receive: Int?) -> IntakeJob {
        IntakeJob(id: "j1", hub: "http://h", created: 0, code: code, location: nil, gps: (1.5, -2), receive: receive,
                  item: "items/x", newItem: true, state: .running, reason: nil,
                  photos: [IntakePhoto(position: 0, sha256: "aa", size: 1, type: "image/png", source: "p", uploaded: false)],
                  stages: [])
    }

    /// The wire messages are exactly those the protocol documents for each stage.
    @Test func messages() throws {
        let sample = job(code: "C", receive: 2)
        #expect(IntakeRequests.create(sample).message == [
            "op": "set", "name": "intake/j1", "version": 0, "idem": "intake/j1/create",
            "data": ["item": "items/x", "code": "C", "gps": ["lat": 1.5, "lon": -2], "expectedPhotos": 1, "receive": 2],
        ])
        #expect(IntakeRequests.created(sample).message == [
            "op": "write", "idem": "intake/j1/created", "ops": [
                ["op": "set", "name": "items/x", "version": 0,
                 "data": ["name": "C", "codes": ["C"], "serials": [], "stock": 0, "photos": []]],
                ["op": "advance", "name": "intake/j1", "from": "queued", "to": "created"],
            ],
        ])
        #expect(IntakeRequests.upload(sample, itemVersion: 4, itemPhotos: ["zz", "aa"]).message == [
            "op": "write", "idem": "intake/j1/upload", "ops": [
                ["op": "merge", "name": "items/x", "version": 4, "data": ["photos": ["zz", "aa"]]],
                ["op": "advance", "name": "intake/j1", "from": "created", "to": "media-uploaded", "data": ["photos": ["aa"]]],
            ],
        ])
        #expect(IntakeRequests.coverSet(sample, itemHasCover: true).message == [
            "op": "write", "idem": "intake/j1/cover-set", "ops": [
                ["op": "advance", "name": "intake/j1", "from": "media-uploaded", "to": "cover-set", "data": ["cover": "aa"]],
            ],
        ])
        #expect(IntakeRequests.done(sample).message == [
            "op": "write", "idem": "intake/j1/done", "ops": [
                ["op": "advance", "name": "intake/j1", "from": "cover-set", "to": "done"],
                ["op": "increment", "name": "items/x", "path": "stock", "by": 2],
            ],
        ])
        #expect(IntakeRequests.fail(sample, reason: "no").message == [
            "op": "advance", "name": "intake/j1", "to": "failed", "reason": "no", "idem": "intake/j1/failed",
        ])
    }
}
