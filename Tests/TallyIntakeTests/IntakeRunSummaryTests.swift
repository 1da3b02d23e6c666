import Testing
import TallyClient
import TallyIntake

/// What a run of intake jobs came to: exit status and `--json`.
@Suite("IntakeRunSummary")
struct IntakeRunSummaryTests {
    static func job(_ id: String) -> IntakeJob {
        IntakeJob(id: id, hub: "http://127.0.0.1:8080", created: 0, code: nil, location: nil, gps: nil, receive: nil,
                  item: nil, newItem: false, state: .running, reason: nil, photos: [], stages: [])
    }

    @Test func doneJobsSucceedAndOneJobIsItsOwnJSON() {
        var summary = IntakeRunSummary()
        summary.record(.starting(Self.job("a")))
        summary.record(.ran(Self.job("a"), .done))
        #expect(summary.succeeded && summary.jobs.map(\.id) == ["a"])
        #expect(summary.json(single: true)["job"] == "a")
        #expect(summary.json(single: false)["jobs"]?.arrayValue?.count == 1)
    }

    @Test func aSkippedFailedOrInterruptedJobFailsTheRun() {
        var busy = IntakeRunSummary()
        busy.record(.busy(Self.job("a")))
        busy.record(.ran(Self.job("b"), .done))
        #expect(!busy.succeeded && busy.failed && !busy.interrupted && busy.jobs.count == 2)
        var failed = IntakeRunSummary()
        failed.record(.ran(Self.job("a"), .failed("refused")))
        #expect(failed.failed && !failed.succeeded)
        var interrupted = IntakeRunSummary()
        interrupted.record(.ran(Self.job("a"), .interrupted(.timeout)))
        #expect(interrupted.interrupted && !interrupted.failed && !interrupted.succeeded)
        #expect(IntakeRunSummary().json(single: false) == ["jobs": []])
    }
}
