import Glibc

/// The hub core's inbox: any thread posts, the core thread takes everything
/// queued at once (so work that arrived together is handled, committed and
/// flushed together). A pthread mutex and condition variable, which the
/// thread sanitizer understands.
final class CoreMailbox<Item>: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var condition = pthread_cond_t()
    private var items: [Item] = []

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
        let wasEmpty = items.count == 1
        pthread_mutex_unlock(&mutex)
        if wasEmpty { pthread_cond_signal(&condition) }
    }

    /// Blocks until something is queued, then returns all of it, swapping in
    /// `spare` (emptied, capacity kept) so the queue's storage is reused.
    func takeAll(reusing spare: inout [Item]) -> [Item] {
        spare.removeAll(keepingCapacity: true)
        pthread_mutex_lock(&mutex)
        while items.isEmpty { pthread_cond_wait(&condition, &mutex) }
        swap(&items, &spare)
        pthread_mutex_unlock(&mutex)
        return spare
    }
}
