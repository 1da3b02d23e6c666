import Dispatch
import Testing
import TallyConcurrency
@testable import TallyNet

/// A loop posting to itself skips the eventfd (nobody to wake), so it must
/// drain what it gave itself before it waits again; iteration-end hooks run
/// once, after the iteration's work, in the order they were added.
@Suite struct LoopSelfPostTests {
    /// One loop thread, a semaphore and a step log for `body`.
    private func onOneLoop(_ body: (EventLoop, DispatchSemaphore, LockedValueBox<[String]>) -> Void) throws {
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        body(group.loops[0], DispatchSemaphore(value: 0), LockedValueBox<[String]>([]))
    }

    @Test func tasksALoopGivesItselfRunWithoutAWake() throws {
        try onOneLoop { loop, done, steps in
            loop.execute {
                #expect(loop.inEventLoop)
                // Nested: a task posting a task posting a task, none of which writes the eventfd.
                loop.execute {
                    steps.withLock { $0.append("first") }
                    loop.execute {
                        steps.withLock { $0.append("second") }
                        done.signal()
                    }
                }
            }
            #expect(done.wait(timeout: .now() + .seconds(5)) == .success, "the loop slept on work it gave itself")
            #expect(steps.withLock { $0 } == ["first", "second"])
        }
    }

    @Test func iterationEndHooksRunOnceInOrderAndMayAddMore() throws {
        try onOneLoop { loop, done, steps in
            loop.execute {
                loop.atIterationEnd { steps.withLock { $0.append("a") } }
                loop.atIterationEnd {
                    steps.withLock { $0.append("b") }
                    loop.atIterationEnd {
                        steps.withLock { $0.append("c") }
                        done.signal()
                    }
                }
                steps.withLock { $0.append("task") }
            }
            #expect(done.wait(timeout: .now() + .seconds(5)) == .success)
            // Let a few more iterations pass: nothing runs twice.
            let later = DispatchSemaphore(value: 0)
            loop.execute { later.signal() }
            #expect(later.wait(timeout: .now() + .seconds(5)) == .success)
            #expect(steps.withLock { $0 } == ["task", "a", "b", "c"])
        }
    }
}
