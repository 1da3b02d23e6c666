@preconcurrency import Glibc
import TallyTestSupport
import Testing
import TallyConcurrency

@Suite struct PrimitivesTests {
    @Test func lockedValueBoxCountsEveryIncrement() {
        let box = LockedValueBox(0)
        onThreads(4) { _ in
            for _ in 0..<10_000 { box.withLock { $0 += 1 } }
        }
        #expect(box.withLock { $0 } == 40_000)
    }

    @Test func lockGuardsStateOutsideIt() {
        final class Counter: @unchecked Sendable { var value = 0 }  // guarded by `lock` below
        let lock = Lock()
        let counter = Counter()
        onThreads(4) { _ in
            for _ in 0..<10_000 { lock.withLock { counter.value += 1 } }
        }
        #expect(counter.value == 40_000)
        lock.lock()
        lock.unlock()
    }

    @Test func withLockPassesResultsAndErrors() {
        struct Refused: Error {}
        let box = LockedValueBox([1, 2, 3])
        #expect(box.withLock { $0.removeLast() } == 3)
        #expect(throws: Refused.self) { try box.withLock { _ in throw Refused() } }
        // The lock was released by the throw.
        #expect(box.withLock { $0 } == [1, 2])
    }

    @Test func conditionLockWaitsForItsPredicate() {
        let queue = ConditionLock<[Int]>([])
        let received = LockedValueBox<[Int]>([])
        onThreads(2) { index in
            if index == 0 {
                for value in 1...100 {
                    queue.withLock { $0.append(value) }
                    queue.signal()
                }
            } else {
                var got: [Int] = []
                while got.count < 100 {
                    got += queue.wait { items -> [Int]? in
                        guard !items.isEmpty else { return nil }
                        defer { items.removeAll() }
                        return items
                    }
                }
                received.withLock { $0 = got }
            }
        }
        #expect(received.withLock { $0 } == Array(1...100))
    }

    @Test func conditionLockTimesOut() {
        let flag = ConditionLock(false)
        var start = timespec(), end = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        let result = flag.wait(timeoutMillis: 50) { $0 ? true : nil }
        clock_gettime(CLOCK_MONOTONIC, &end)
        #expect(result == nil)
        let elapsed = (end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1_000_000
        #expect(elapsed >= 45)
        flag.withLock { $0 = true }
        #expect(flag.wait(timeoutMillis: 50) { $0 ? true : nil } == true)
    }

    @Test func countdownLatchOpensAtZero() {
        let latch = CountdownLatch(count: 3)
        #expect(!latch.isOpen)
        #expect(!latch.wait(timeoutMillis: 10))
        onThreads(3) { _ in latch.countDown() }
        latch.wait()
        #expect(latch.isOpen)
        latch.countDown()  // never below zero
        #expect(latch.wait(timeoutMillis: 0))
        #expect(CountdownLatch(count: 0).isOpen)
    }

    @Test func mailboxSaysWhenToWakeAndHandsOverEverything() {
        let mailbox = Mailbox<Int>()
        var batch: [Int] = [99]
        #expect(!mailbox.takeAll(into: &batch))
        #expect(batch.isEmpty)
        #expect(mailbox.post(1))
        #expect(!mailbox.post(2))
        #expect(!mailbox.post(contentsOf: [3, 4]))
        #expect(mailbox.takeAll(into: &batch))
        #expect(batch == [1, 2, 3, 4])
        #expect(mailbox.isEmpty)
        #expect(!mailbox.post(contentsOf: []))
        #expect(mailbox.post(contentsOf: [5]))
        #expect(mailbox.takeAll(into: &batch))
        #expect(batch == [5])
    }

    @Test func mailboxLosesNothingAcrossThreads() {
        let mailbox = Mailbox<Int>()
        let total = LockedValueBox(0)
        onThreads(4) { index in
            if index < 3 {
                for value in 1...5_000 { mailbox.post(value) }
            } else {
                var batch: [Int] = []
                var seen = 0
                while seen < 15_000 {
                    if mailbox.takeAll(into: &batch) { seen += batch.count } else { sched_yield() }
                }
                total.withLock { $0 = seen }
            }
        }
        #expect(total.withLock { $0 } == 15_000)
    }
}
