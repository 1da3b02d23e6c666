@preconcurrency import Glibc

/// A value behind a pthread mutex.
///
/// Used instead of `Synchronization.Mutex` where threads meet (loop mailboxes,
/// client inboxes): on Linux `Mutex` locks with raw futex calls that
/// ThreadSanitizer cannot see, so every use shows up as a false data race and
/// hides real ones. A pthread mutex is understood by TSan and costs the same
/// when uncontended. The mutex lives at a stable heap address, as pthreads
/// require.
public final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
