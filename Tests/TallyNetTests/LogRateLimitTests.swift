import Testing
@testable import TallyNet

@Suite("LogRateLimit")
struct LogRateLimitTests {
    @Test func aBurstPassesThenTheRestIsCountedAndReported() {
        let limit = LogRateLimit(burst: 3, intervalMillis: 1000)
        #expect((0..<3).map { _ in limit.admit(now: 10_000) } == [0, 0, 0])
        #expect((0..<5).allSatisfy { _ in limit.admit(now: 10_500) == nil })
        // The next window's first line says how many were dropped.
        #expect(limit.admit(now: 11_000) == 5)
        #expect(limit.admit(now: 11_001) == 0)
    }
}
