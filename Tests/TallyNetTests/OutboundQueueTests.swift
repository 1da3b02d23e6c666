import CLinuxShim
import Glibc
import Testing
@testable import TallyNet

/// The unwritten bytes, in order, as `withIOVecs` would hand them to writev.
private func pending(_ queue: OutboundQueue, max: Int = 64) -> [UInt8] {
    let iov = UnsafeMutablePointer<iovec>.allocate(capacity: max)
    defer { iov.deallocate() }
    return queue.withIOVecs(iov, max: max) { count in
        var out: [UInt8] = []
        for i in 0..<count {
            out += UnsafeRawBufferPointer(start: iov[i].iov_base, count: iov[i].iov_len)
        }
        return out
    }
}

private func firstChunk(_ queue: OutboundQueue) -> [UInt8] {
    queue.withFirstChunk { Array($0) }
}

/// The base address of an array's buffer: it stays put on mutation only when
/// the array is uniquely referenced (copy-on-write copies otherwise).
private func address(_ array: [UInt8]) -> UnsafeRawPointer? {
    array.withUnsafeBytes { $0.baseAddress }
}

@Suite struct OutboundQueueTests {
    @Test func startsEmpty() {
        let queue = OutboundQueue()
        #expect(queue.isEmpty)
        #expect(queue.byteCount == 0)
        #expect(queue.chunkCount == 0)
        #expect(pending(queue).isEmpty)
    }

    @Test func appendCountsBytesAndIgnoresEmptyChunks() {
        var queue = OutboundQueue()
        queue.append([1, 2, 3])
        queue.append([])
        queue.append([4, 5])
        #expect(!queue.isEmpty)
        #expect(queue.byteCount == 5)
        #expect(queue.chunkCount == 2)
        #expect(firstChunk(queue) == [1, 2, 3])
        #expect(pending(queue) == [1, 2, 3, 4, 5])
    }

    @Test func consumeWithinAChunk() {
        var queue = OutboundQueue()
        queue.append([1, 2, 3, 4])
        queue.append([5, 6])
        queue.consume(1)
        #expect(queue.byteCount == 5)
        #expect(queue.chunkCount == 2)
        #expect(firstChunk(queue) == [2, 3, 4])
        queue.consume(2)
        #expect(firstChunk(queue) == [4])
        #expect(pending(queue) == [4, 5, 6])
    }

    @Test func consumeAcrossChunkBoundaries() {
        var queue = OutboundQueue()
        queue.append([1, 2, 3])
        queue.append([4, 5])
        queue.append([6, 7, 8, 9])
        // Ends exactly on a boundary.
        queue.consume(3)
        #expect(queue.chunkCount == 2)
        #expect(firstChunk(queue) == [4, 5])
        // Crosses a boundary into the middle of the next chunk.
        queue.consume(3)
        #expect(queue.byteCount == 3)
        #expect(queue.chunkCount == 1)
        #expect(firstChunk(queue) == [7, 8, 9])
        queue.consume(3)
        #expect(queue.isEmpty)
        #expect(queue.chunkCount == 0)
    }

    @Test func consumeSeveralWholeChunksAtOnce() {
        var queue = OutboundQueue()
        for i in 0..<10 { queue.append([UInt8(i), UInt8(i)]) }
        queue.consume(15)
        #expect(queue.byteCount == 5)
        #expect(pending(queue) == [7, 8, 8, 9, 9])
    }

    /// Many chunks written one at a time: the queue compacts its consumed
    /// prefix (past 32 chunks) without losing order or the partial offset.
    @Test func longQueueKeepsOrderThroughCompaction() {
        var queue = OutboundQueue()
        var expected: [UInt8] = []
        for i in 0..<100 {
            let chunk = [UInt8](repeating: UInt8(i), count: 3)
            queue.append(chunk)
            expected += chunk
        }
        var written = 0
        // Write in odd-sized steps so offsets land everywhere.
        while written < expected.count {
            let step = min(7, expected.count - written)
            queue.consume(step)
            written += step
            #expect(queue.byteCount == expected.count - written)
            if !queue.isEmpty {
                #expect(firstChunk(queue).first == expected[written])
                #expect(pending(queue, max: 1000) == Array(expected[written...]))
            }
            // Keep appending while consuming, as a live connection does.
            if written == 210 {
                queue.append([200, 201])
                expected += [200, 201]
            }
        }
        #expect(queue.isEmpty)
    }

    @Test func discardUnstartedDropsEverythingWhenNothingWasWritten() {
        var queue = OutboundQueue()
        queue.append([1, 2])
        queue.append([3])
        queue.discardUnstarted()
        #expect(queue.isEmpty)
        #expect(queue.byteCount == 0)
        #expect(queue.chunkCount == 0)
    }

    @Test func discardUnstartedKeepsAPartlyWrittenChunk() {
        var queue = OutboundQueue()
        queue.append([1, 2, 3, 4])
        queue.append([5, 6])
        queue.append([7])
        queue.consume(1)
        queue.discardUnstarted()
        #expect(queue.byteCount == 3)
        #expect(queue.chunkCount == 1)
        #expect(pending(queue) == [2, 3, 4])
        // What comes next (the close frame) follows the kept remainder.
        queue.append([0x88, 0])
        #expect(pending(queue) == [2, 3, 4, 0x88, 0])
        queue.consume(5)
        #expect(queue.isEmpty)
    }

    @Test func discardUnstartedAfterWholeChunksWereWritten() {
        var queue = OutboundQueue()
        queue.append([1, 2])
        queue.append([3, 4])
        queue.append([5, 6])
        queue.consume(2)  // first chunk done, second not started
        queue.discardUnstarted()
        #expect(queue.isEmpty)
        #expect(queue.chunkCount == 0)
        queue.append([9])
        #expect(pending(queue) == [9])
    }

    @Test func discardUnstartedOnAnEmptyQueue() {
        var queue = OutboundQueue()
        queue.discardUnstarted()
        #expect(queue.isEmpty)
    }

    /// A drained queue drops its chunk references: the caller's array is
    /// uniquely referenced again (mutating it does not copy).
    @Test func drainedQueueReleasesStorage() {
        var queue = OutboundQueue()
        var frame = [UInt8](repeating: 7, count: 4096)
        let original = address(frame)
        queue.append(frame)
        queue.consume(4095)
        // Still queued: the queue shares the buffer, so a write copies it.
        frame[0] = 1
        #expect(address(frame) != original)

        var shared = [UInt8](repeating: 8, count: 4096)
        let sharedAddress = address(shared)
        queue.append(shared)
        queue.consume(1 + 4096)
        #expect(queue.isEmpty)
        shared[0] = 1
        #expect(address(shared) == sharedAddress, "the drained queue still references the chunk")
    }

    @Test func discardReleasesDroppedChunks() {
        var queue = OutboundQueue()
        var frame = [UInt8](repeating: 7, count: 4096)
        let original = address(frame)
        queue.append([1])
        queue.append(frame)
        queue.discardUnstarted()
        frame[0] = 1
        #expect(address(frame) == original, "a discarded chunk is still referenced")
    }

    @Test func withIOVecsFillsInOrderWithOffsets() {
        var queue = OutboundQueue()
        let a: [UInt8] = [10, 11, 12, 13, 14]
        let b: [UInt8] = [20, 21]
        let c: [UInt8] = [30, 31, 32]
        queue.append(a)
        queue.append(b)
        queue.append(c)
        queue.consume(2)
        let iov = UnsafeMutablePointer<iovec>.allocate(capacity: 8)
        defer { iov.deallocate() }
        let count = queue.withIOVecs(iov, max: 8) { count -> Int in
            #expect(iov[0].iov_len == 3)
            #expect(iov[1].iov_len == 2)
            #expect(iov[2].iov_len == 3)
            let bytes = (0..<count).map { Array(UnsafeRawBufferPointer(start: iov[$0].iov_base, count: iov[$0].iov_len)) }
            #expect(bytes == [[12, 13, 14], [20, 21], [30, 31, 32]])
            return count
        }
        #expect(count == 3)
    }

    @Test func withIOVecsStopsAtMax() {
        var queue = OutboundQueue()
        for i in 0..<5 { queue.append([UInt8(i)]) }
        queue.consume(1)
        let iov = UnsafeMutablePointer<iovec>.allocate(capacity: 2)
        defer { iov.deallocate() }
        let seen = queue.withIOVecs(iov, max: 2) { count in
            (0..<count).map { UnsafeRawBufferPointer(start: iov[$0].iov_base, count: iov[$0].iov_len).first! }
        }
        #expect(seen == [1, 2])
    }

    /// The same frame queued twice (a fan-out) is one buffer referenced
    /// twice, written twice.
    @Test func sharedChunkQueuedTwice() {
        var queue = OutboundQueue()
        let frame: [UInt8] = [0x81, 2, 0x68, 0x69]
        queue.append(frame)
        queue.append(frame)
        #expect(queue.byteCount == 8)
        #expect(pending(queue) == frame + frame)
    }
}
