import TallyConcurrency

/// The hub core's inbox: any thread posts, the core thread takes everything
/// queued at once (so work that arrived together is handled, committed and
/// flushed together). A `ConditionLock` (a pthread mutex and condition,
/// which the thread sanitizer understands) around the queue and three flags.
///
/// It also lets a poster do the core's work itself (flat combining): when
/// nobody is doing core work and nothing is queued, `claim` makes the caller
/// the core for one batch, so a lone request costs no thread wake-up. The
/// `busy` flag, read and written under the lock, is what makes the core's
/// state single-threaded whichever thread runs it, and the lock orders one
/// holder's writes before the next holder's reads.
final class CoreMailbox<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        /// Someone (the core thread or a claimant) is doing core work.
        var busy = false
        /// The core thread waits in `takeAll` (so a post must signal).
        var waiting = false
        /// The core is busy because the core thread took a batch (not a claim).
        var takerHolds = false
    }

    private let state = ConditionLock(State())

    func post(_ item: Item) {
        let wake = state.withLock { s in
            s.items.append(item)
            return s.waiting && !s.busy && s.items.count == 1
        }
        if wake { state.signal() }
    }

    func post(contentsOf batch: [Item]) {
        let wake = state.withLock { s in
            s.items.append(contentsOf: batch)
            return s.waiting && !s.busy && s.items.count == batch.count
        }
        if wake { state.signal() }
    }

    /// Queues `batch` for the core thread — or, when no one does core work
    /// and nothing waits, returns true without queueing: the caller is then
    /// the core until it calls `release`.
    func claim(orPost batch: [Item]) -> Bool {
        let (claimed, wake) = state.withLock { s -> (Bool, Bool) in
            if !s.busy && s.items.isEmpty {
                s.busy = true
                return (true, false)
            }
            s.items.append(contentsOf: batch)
            return (false, s.waiting && !s.busy && s.items.count == batch.count)
        }
        if wake { state.signal() }
        return claimed
    }

    /// Ends a claim; what was posted meanwhile goes to the core thread.
    func release() {
        let wake = state.withLock { s in
            s.busy = false
            return s.waiting && !s.items.isEmpty
        }
        if wake { state.signal() }
    }

    /// Blocks until something is queued and nobody else does core work, then
    /// returns all of it, swapping in `spare` (emptied, capacity kept) so the
    /// queue's storage is reused. The caller does core work until its next
    /// `takeAll` (or for good, if it never calls again).
    func takeAll(reusing spare: inout [Item]) -> [Item] {
        spare.removeAll(keepingCapacity: true)
        var first = true
        state.wait { s -> Void? in
            if first {
                first = false
                // The core thread's previous batch is done — but a claimant
                // may hold the core now (before this thread's first take),
                // and keeps it.
                if s.takerHolds {
                    s.busy = false
                    s.takerHolds = false
                }
                s.waiting = true
            }
            guard !s.items.isEmpty, !s.busy else { return nil }
            s.waiting = false
            s.busy = true
            s.takerHolds = true
            swap(&s.items, &spare)
            return ()
        }
        return spare
    }
}
