import Testing
import TallyIntake
import TallyProtocol
import TallyTestSupport

/// Which jobs `intake resume` and `status` mean, and how status shows one.
@Suite("IntakeResumePlan")
struct IntakeResumePlanTests {
    static let here = "http://127.0.0.1:8080"

    static func job(_ id: String, _ state: JobState = .running, hub: String = here) -> IntakeJob {
        IntakeJob(id: id, hub: hub, created: 0, code: nil, location: nil, gps: nil, receive: nil, item: nil,
                  newItem: false, state: state, reason: state == .failed ? "refused" : nil, photos: [], stages: [])
    }

    static let jobs = [job("aaaa1111"), job("aaaa2222", .done), job("bbbb1111", .failed), job("cccc1111", hub: "http://other"),
                       job("dddd1111")]

    @Test func aJobIsNamedByIdRecordOrUniquePrefix() throws {
        #expect(try Self.jobs.job(named: "dddd1111").id == "dddd1111")
        #expect(try Self.jobs.job(named: "intake/bbbb1111").id == "bbbb1111")
        #expect(try Self.jobs.job(named: "cccc").id == "cccc1111")
        #expect(throws: IntakeJobLookup.ambiguous(matches: 2)) { try Self.jobs.job(named: "aaaa") }
        #expect(throws: IntakeJobLookup.notFound) { try Self.jobs.job(named: "ccc") }  // prefixes need 4 characters
        #expect(throws: IntakeJobLookup.notFound) { try Self.jobs.job(named: "eeee") }
    }

    @Test func aNamedJobRunsOnlyUnfinishedAndOnItsHub() throws {
        func plan(_ wanted: String) throws -> String {
            switch try IntakeResumePlan(jobs: Self.jobs, hub: Self.here, wanted: wanted) {
            case .run(let job): "run \(job.id)"
            case .done(let job): "done \(job.id)"
            case .failed(let job): "failed \(job.id)"
            case .elsewhere(let job): "elsewhere \(job.id)"
            case .unfinished: "unfinished"
            }
        }
        #expect(try plan("aaaa1111") == "run aaaa1111")
        #expect(try plan("aaaa2222") == "done aaaa2222")
        #expect(try plan("bbbb") == "failed bbbb1111")
        #expect(try plan("cccc1111") == "elsewhere cccc1111")
    }

    @Test func withoutANameEveryUnfinishedJobOfThisHubRuns() throws {
        guard case .unfinished(let run, let elsewhere) = try IntakeResumePlan(jobs: Self.jobs, hub: Self.here, wanted: nil) else {
            Issue.record("expected every unfinished job")
            return
        }
        #expect(run.map(\.id) == ["aaaa1111", "dddd1111"])
        #expect(elsewhere.map(\.id) == ["cccc1111"])
    }

    @Test func statusShowsStagesAndPhotos() {
        var job = Self.job("eeee1111", .failed)
        job.item = "items/x"
        job.newItem = true
        job.photos = [IntakePhoto(position: 0, sha256: "ab12", size: 2048, type: "image/png", source: "/p.png", uploaded: true)]
        job.stages = [StageRecord(stage: .create, status: .confirmed, result: ["version": 1], updated: 0),
                      StageRecord(stage: .upload, status: .pending, result: ["seq": 7], updated: 0)]
        #expect(job.statusLines == [
            "job eeee1111 intake/eeee1111 failed item items/x (new) hub http://127.0.0.1:8080",
            "  reason: refused",
            "  create    confirmed version 1",
            "  upload    pending   1/1 photos stored, seq 7",
            "  photo 1 ab12 image/png 2 KiB stored /p.png",
        ])
    }

    @Test func lookingAtAMissingOutboxCreatesNothing() throws {
        let directory = try TemporaryDirectory(prefix: "intake-existing")
        let path = "\(directory.path)/sub/outbox.sqlite"
        #expect(try IntakeOutbox.existing(path: path) == nil)
        _ = try IntakeOutbox(path: path)
        #expect(try IntakeOutbox.existing(path: path)?.path == path)
    }
}
