import Testing
@testable import TallyNet

/// Collects which timers fired, in order. Timer bodies are plain closures
/// run on the caller's thread here (no loop involved).
private final class Fired {
    var order: [Int] = []
}

/// Pops every expired timer at `now` and runs it.
private func runExpired(_ heap: inout TimerHeap, now: Int64) {
    while let body = heap.popExpired(now: now) { body() }
}

@Suite struct TimerHeapTests {
    @Test func emptyHeapHasNoDeadline() {
        var heap = TimerHeap()
        #expect(heap.millisUntilNext(now: 0) == -1)
        #expect(heap.popExpired(now: .max) == nil)
    }

    @Test func firesInDeadlineOrder() {
        var heap = TimerHeap()
        let fired = Fired()
        for deadline in [50, 10, 40, 20, 30, 60, 5] {
            _ = heap.schedule(at: Int64(deadline)) { fired.order.append(deadline) }
        }
        runExpired(&heap, now: 100)
        #expect(fired.order == [5, 10, 20, 30, 40, 50, 60])
        #expect(heap.millisUntilNext(now: 100) == -1)
    }

    @Test func onlyDueTimersFire() {
        var heap = TimerHeap()
        let fired = Fired()
        for deadline in [30, 10, 20] {
            _ = heap.schedule(at: Int64(deadline)) { fired.order.append(deadline) }
        }
        runExpired(&heap, now: 9)
        #expect(fired.order.isEmpty)
        runExpired(&heap, now: 20)  // a deadline equal to now is due
        #expect(fired.order == [10, 20])
        #expect(heap.millisUntilNext(now: 20) == 10)
        runExpired(&heap, now: 30)
        #expect(fired.order == [10, 20, 30])
    }

    @Test func millisUntilNext() {
        var heap = TimerHeap()
        _ = heap.schedule(at: 1_000) {}
        _ = heap.schedule(at: 400) {}
        #expect(heap.millisUntilNext(now: 100) == 300)
        #expect(heap.millisUntilNext(now: 400) == 0)
        #expect(heap.millisUntilNext(now: 900) == 0, "an overdue timer means 'do not wait'")
        // Far deadlines clamp to what epoll_wait takes.
        var far = TimerHeap()
        _ = far.schedule(at: .max) {}
        #expect(far.millisUntilNext(now: 0) == Int32.max)
    }

    @Test func equalDeadlinesAllFire() {
        var heap = TimerHeap()
        let fired = Fired()
        for i in 0..<5 { _ = heap.schedule(at: 10) { fired.order.append(i) } }
        runExpired(&heap, now: 10)
        #expect(fired.order.sorted() == [0, 1, 2, 3, 4])
    }

    @Test func cancelledTimersDoNotFire() {
        var heap = TimerHeap()
        let fired = Fired()
        var ids: [Int: UInt64] = [:]
        for deadline in [10, 20, 30, 40] {
            ids[deadline] = heap.schedule(at: Int64(deadline)) { fired.order.append(deadline) }
        }
        heap.cancel(ids[10]!)  // the earliest (the heap's root)
        heap.cancel(ids[30]!)  // one in the middle
        runExpired(&heap, now: 100)
        #expect(fired.order == [20, 40])
    }

    @Test func idsAreUnique() {
        var heap = TimerHeap()
        let ids = (0..<100).map { _ in heap.schedule(at: 1) {} }
        #expect(Set(ids).count == 100)
    }

    /// Cancelling one timer never cancels a timer scheduled later (ids are
    /// not reused), even after the first fired.
    @Test func cancellingAFiredTimerDoesNotAffectOthers() {
        var heap = TimerHeap()
        let fired = Fired()
        let first = heap.schedule(at: 1) { fired.order.append(1) }
        runExpired(&heap, now: 1)
        heap.cancel(first)
        _ = heap.schedule(at: 2) { fired.order.append(2) }
        runExpired(&heap, now: 2)
        #expect(fired.order == [1, 2])
    }

    /// A body may schedule another timer (the loop pops one at a time, so
    /// the heap is not being mutated while a body runs).
    @Test func bodiesMayScheduleTimers() {
        var heap = TimerHeap()
        let fired = Fired()
        _ = heap.schedule(at: 5) { fired.order.append(5) }
        var body = heap.popExpired(now: 5)
        body?()
        _ = heap.schedule(at: 6) { fired.order.append(6) }
        body = heap.popExpired(now: 10)
        body?()
        #expect(fired.order == [5, 6])
    }

    @Test func randomDeadlinesComeOutSorted() {
        var heap = TimerHeap()
        let fired = Fired()
        var generator = SystemRandomNumberGenerator()
        var deadlines: [Int] = []
        var cancelled = Set<Int>()
        for i in 0..<500 {
            let deadline = Int.random(in: 0..<200, using: &generator)
            deadlines.append(deadline)
            let id = heap.schedule(at: Int64(deadline)) { fired.order.append(deadline) }
            if i % 7 == 0 {
                heap.cancel(id)
                cancelled.insert(i)
            }
        }
        // Drain in a few steps of time, as a loop would.
        for now in stride(from: 0, through: 200, by: 25) { runExpired(&heap, now: Int64(now)) }
        let expected = deadlines.enumerated().filter { !cancelled.contains($0.offset) }.map(\.element).sorted()
        #expect(fired.order == expected)
    }

    @Test func cancellingAFiredTimerKeepsNothing() {
        var heap = TimerHeap()
        let id = heap.schedule(at: 1) {}
        runExpired(&heap, now: 5)
        heap.cancel(id)
        #expect(heap.pendingCount == 0)
        let fired = Fired()
        _ = heap.schedule(at: 10) { fired.order.append(10) }
        runExpired(&heap, now: 10)
        #expect(fired.order == [10])
    }
}
