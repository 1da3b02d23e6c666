@preconcurrency import Glibc

/// A value behind a pthread mutex, with one condition variable to wait on.
///
/// The store's threads meet only here (the commit queue, the checkpoint
/// request, the in-memory tables). A pthread mutex rather than
/// `Synchronization.Mutex`: ThreadSanitizer understands pthreads but not the
/// raw futex calls `Mutex` makes on Linux, and we need a condition variable
/// anyway. The mutex and condition live at stable heap addresses, as pthreads
/// require. (TallyNet has the same idea as `Locked`; the store does not
/// depend on TallyNet.)
final class Guarded<State>: @unchecked Sendable {
    private var state: State
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }

    /// Runs `body` under the lock until it returns a value, waiting on the
    /// condition in between. `body` sees the state after every wake-up, so it
    /// may also record that it is about to wait.
    func wait<R>(_ body: (inout State) -> R?) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if let result = body(&state) { return result }
            pthread_cond_wait(condition, mutex)
        }
    }

    /// Wakes one waiter. The state change it should see must already have
    /// been made under the lock (signalling after unlocking is allowed by POSIX
    /// and saves the woken thread from blocking on the mutex at once).
    func signal() {
        pthread_cond_signal(condition)
    }

    /// Wakes every waiter.
    func broadcast() {
        pthread_cond_broadcast(condition)
    }
}
