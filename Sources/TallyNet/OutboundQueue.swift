import CLinuxShim

/// Bytes waiting to be written to one connection, in order.
///
/// Chunks are `[UInt8]` values: a frame built once for a fan-out is the same
/// copy-on-write buffer in every subscriber's queue, so queueing it costs a
/// reference count, not a copy. The first chunk is held inline and only the
/// ones behind it in an array, so the usual queue — one push waiting for
/// the end of the loop iteration — allocates nothing, and an empty queue
/// holds no storage: an idle connection pays nothing for it.
struct OutboundQueue {
    /// The chunk being written (empty exactly when the queue is).
    private var front: [UInt8] = []
    /// Chunks behind `front`, from index `head` on.
    private var rest: [[UInt8]] = []
    private var head = 0
    /// Bytes of `front` already written.
    private var offset = 0
    /// Bytes not yet written.
    private(set) var byteCount = 0

    var isEmpty: Bool { byteCount == 0 }

    mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        if byteCount == 0 {
            front = bytes
        } else {
            rest.append(bytes)
        }
        byteCount += bytes.count
    }

    /// Drops every chunk that has not started to go out. A chunk already
    /// partly written is kept, or the peer would see half a frame.
    mutating func discardUnstarted() {
        guard byteCount > 0 else { return }
        for chunk in rest[head...] { byteCount -= chunk.count }
        rest = []
        head = 0
        if offset == 0 {
            byteCount -= front.count
            front = []
        }
    }

    /// Records that `n` bytes from the front were written.
    mutating func consume(_ n: Int) {
        var left = n
        byteCount -= n
        while left > 0 {
            let available = front.count - offset
            if left >= available {
                left -= available
                advance()
            } else {
                offset += left
                left = 0
            }
        }
    }

    /// `front` is written: the next chunk moves up.
    private mutating func advance() {
        offset = 0
        guard head < rest.count else {
            front = []
            rest = []  // release the storage: idle connections keep none
            head = 0
            return
        }
        front = rest[head]
        rest[head] = []
        head += 1
        if head == rest.count {
            rest = []
            head = 0
        } else if head >= 32 && head * 2 >= rest.count {
            rest.removeFirst(head)
            head = 0
        }
    }

    /// Calls `body` with the unwritten bytes of the first chunk.
    func withFirstChunk<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        front.withUnsafeBytes { raw in body(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
    }

    var chunkCount: Int { byteCount == 0 ? 0 : 1 + rest.count - head }

    /// Fills `iov` with up to `max` unwritten chunks and calls `body` with the
    /// count, while every chunk's storage is pinned.
    func withIOVecs<R>(_ iov: UnsafeMutablePointer<iovec>, max: Int, _ body: (Int) -> R) -> R {
        func step(_ index: Int, _ filled: Int) -> R {
            if index == rest.count || filled == max { return body(filled) }
            return rest[index].withUnsafeBytes { raw in
                iov[filled] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress!), iov_len: raw.count)
                return step(index + 1, filled + 1)
            }
        }
        guard byteCount > 0, max > 0 else { return body(0) }
        return front.withUnsafeBytes { raw in
            iov[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + offset), iov_len: raw.count - offset)
            return step(head, 1)
        }
    }
}
