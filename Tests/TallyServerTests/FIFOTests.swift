import Testing
@testable import TallyServer

@Suite("FIFO")
struct FIFOTests {
    @Test func itemsComeOutInOrder() {
        var queue = FIFO<Int>()
        #expect(queue.popFirst() == nil && queue.isEmpty)
        for n in 0..<5 { queue.append(n) }
        #expect(queue.count == 5)
        #expect((0..<5).map { _ in queue.popFirst() } == [0, 1, 2, 3, 4])
        #expect(queue.popFirst() == nil && queue.isEmpty)
    }

    @Test func aQueueThatNeverDrainsStaysTheSizeOfWhatWaits() {
        var queue = FIFO<Int>()
        for n in 0..<10 { queue.append(n) }
        var taken: [Int] = [], most = 0
        for n in 10..<100_000 {
            queue.append(n)
            taken.append(queue.popFirst()!)
            most = max(most, queue.storedCount)
        }
        #expect(taken == Array(0..<99_990) && queue.count == 10)
        #expect(most <= 64, "\(most) slots for 10 waiting")
    }
}
