import CLinuxShim

/// Bytes waiting to be written to one connection, in order.
///
/// Chunks are `[UInt8]` values: a frame built once for a fan-out is the same
/// copy-on-write buffer in every subscriber's queue, so queueing it costs a
/// reference count, not a copy. An empty queue holds no storage, so an idle
/// connection pays nothing for it.
struct OutboundQueue {
    private var chunks: [[UInt8]] = []
    /// Index of the first chunk not yet fully written.
    private var head = 0
    /// Bytes of `chunks[head]` already written.
    private var offset = 0
    /// Bytes not yet written.
    private(set) var byteCount = 0

    var isEmpty: Bool { byteCount == 0 }

    mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        chunks.append(bytes)
        byteCount += bytes.count
    }

    /// Drops every chunk that has not started to go out. A chunk already
    /// partly written is kept, or the peer would see half a frame.
    mutating func discardUnstarted() {
        guard head < chunks.count else { return }
        let keep = offset > 0 ? head + 1 : head
        for chunk in chunks[keep...] { byteCount -= chunk.count }
        chunks.removeSubrange(keep...)
        compactIfDrained()
    }

    /// Records that `n` bytes from the front were written.
    mutating func consume(_ n: Int) {
        var left = n
        byteCount -= n
        while left > 0 {
            let available = chunks[head].count - offset
            if left >= available {
                left -= available
                head += 1
                offset = 0
            } else {
                offset += left
                left = 0
            }
        }
        compactIfDrained()
    }

    private mutating func compactIfDrained() {
        if head == chunks.count {
            chunks = []  // release the storage: idle connections keep none
            head = 0
            offset = 0
        } else if head >= 32 && head * 2 >= chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
    }

    /// Calls `body` with the unwritten bytes of the first chunk.
    func withFirstChunk<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        chunks[head].withUnsafeBytes { raw in body(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
    }

    var chunkCount: Int { chunks.count - head }

    /// Fills `iov` with up to `max` unwritten chunks and calls `body` with the
    /// count, while every chunk's storage is pinned.
    func withIOVecs<R>(_ iov: UnsafeMutablePointer<iovec>, max: Int, _ body: (Int) -> R) -> R {
        func step(_ index: Int, _ filled: Int) -> R {
            if index == chunks.count || filled == max { return body(filled) }
            return chunks[index].withUnsafeBytes { raw in
                let start = index == head ? offset : 0
                iov[filled] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + start),
                                    iov_len: raw.count - start)
                return step(index + 1, filled + 1)
            }
        }
        return step(head, 0)
    }
}
