import Glibc

/// The hub core's inbox: any thread posts, the core thread takes everything
/// queued at once (so work that arrived together is handled, committed and
/// flushed together). A pthread mutex and condition variable, which the
/// thread sanitizer understands.
///
/// It also lets a poster do the core's work itself (flat combining): when
/// nobody is doing core work and nothing is queued, `claim` makes the caller
/// the core for one batch, so a lone request costs no thread wake-up. The
/// `busy` flag, read and written under the mutex, is what makes the core's
/// state single-threaded whichever thread runs it, and the mutex orders one
/// holder's writes before the next holder's reads.
final class CoreMailbox<Item>: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var condition = pthread_cond_t()
    private var items: [Item] = []
    /// Someone (the core thread or a claimant) is doing core work.
    private var busy = false
    /// The core thread waits in `takeAll` (so a post must signal).
    private var waiting = false
    /// The core is busy because the core thread took a batch (not a claim).
    private var takerHolds = false

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    func post(_ item: Item) {
        pthread_mutex_lock(&mutex)
        items.append(item)
        let wake = waiting && !busy && items.count == 1
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&condition) }
    }

    func post(contentsOf batch: [Item]) {
        pthread_mutex_lock(&mutex)
        items.append(contentsOf: batch)
        let wake = waiting && !busy && items.count == batch.count
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&condition) }
    }

    /// Queues `batch` for the core thread — or, when no one does core work
    /// and nothing waits, returns true without queueing: the caller is then
    /// the core until it calls `release`.
    func claim(orPost batch: [Item]) -> Bool {
        pthread_mutex_lock(&mutex)
        if !busy && items.isEmpty {
            busy = true
            pthread_mutex_unlock(&mutex)
            return true
        }
        items.append(contentsOf: batch)
        let wake = waiting && !busy && items.count == batch.count
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&condition) }
        return false
    }

    /// Ends a claim; what was posted meanwhile goes to the core thread.
    func release() {
        pthread_mutex_lock(&mutex)
        busy = false
        let wake = waiting && !items.isEmpty
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&condition) }
    }

    /// Blocks until something is queued and nobody else does core work, then
    /// returns all of it, swapping in `spare` (emptied, capacity kept) so the
    /// queue's storage is reused. The caller does core work until its next
    /// `takeAll` (or for good, if it never calls again).
    func takeAll(reusing spare: inout [Item]) -> [Item] {
        spare.removeAll(keepingCapacity: true)
        pthread_mutex_lock(&mutex)
        // The core thread's previous batch is done — but a claimant may hold
        // the core now (before this thread's first take), and keeps it.
        if takerHolds {
            busy = false
            takerHolds = false
        }
        waiting = true
        while items.isEmpty || busy { pthread_cond_wait(&condition, &mutex) }
        waiting = false
        busy = true
        takerHolds = true
        swap(&items, &spare)
        pthread_mutex_unlock(&mutex)
        return spare
    }
}
