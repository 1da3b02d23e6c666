@preconcurrency import Glibc

/// A pthread mutex in the tail of a heap object, with the value it guards as
/// the object's header: the storage behind `Lock`, `LockedValueBox`,
/// `ConditionLock` and `Mailbox`.
///
/// pthreads require a mutex to keep one address for its whole life. A
/// `pthread_mutex_t` stored inline in a struct, or in a class's stored
/// property passed with `&`, has no such guarantee: Swift may hand the call a
/// temporary copy. A `ManagedBuffer`'s tail elements are reached only through
/// pointers and never move, and value and mutex share one allocation.
///
/// A pthread mutex rather than `Synchronization.Mutex`: on Linux the latter
/// locks with raw futex calls that ThreadSanitizer cannot see, so every use
/// was reported as a data race (see ARCHITECTURE.md, "Threads"). Uncontended,
/// both cost one atomic exchange in and one out.
///
/// `ManagedBuffer` may not be Sendable, so the public types that hold this
/// storage say `@unchecked Sendable` instead, each because it reaches the
/// header only with the mutex held.
@usableFromInline
final class LockStorage<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    @inlinable
    static func make(_ value: Value) -> LockStorage<Value> {
        let buffer = create(minimumCapacity: 1) { _ in value }
        let storage = unsafeDowncast(buffer, to: LockStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            #if DEBUG
            // Debug builds report a lock taken twice by one thread, or
            // released by a thread that does not hold it, instead of hanging.
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
            #endif
            let rc = pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
            precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
        }
        return storage
    }

    @inlinable
    deinit {
        withUnsafeMutablePointerToElements { mutex in
            let rc = pthread_mutex_destroy(mutex)
            assert(rc == 0, "pthread_mutex_destroy failed (still locked?): \(rc)")
            mutex.deinitialize(count: 1)
        }
    }

    @inlinable
    func lock() {
        withUnsafeMutablePointerToElements { mutex in
            let rc = pthread_mutex_lock(mutex)
            assert(rc == 0, "pthread_mutex_lock failed: \(rc)")
        }
    }

    @inlinable
    func unlock() {
        withUnsafeMutablePointerToElements { mutex in
            let rc = pthread_mutex_unlock(mutex)
            assert(rc == 0, "pthread_mutex_unlock failed: \(rc)")
        }
    }

    /// Runs `body` on the value with the mutex held.
    @inlinable
    func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try withLockedPointers { value, _ in try body(&value.pointee) }
    }

    /// Runs `body` with the value and the mutex, with the mutex held: for
    /// waiting on a condition variable, which releases and retakes it.
    @inlinable
    func withLockedPointers<Result>(
        _ body: (UnsafeMutablePointer<Value>, UnsafeMutablePointer<pthread_mutex_t>) throws -> Result
    ) rethrows -> Result {
        try withUnsafeMutablePointers { value, mutex in
            let rc = pthread_mutex_lock(mutex)
            assert(rc == 0, "pthread_mutex_lock failed: \(rc)")
            defer {
                let rc = pthread_mutex_unlock(mutex)
                assert(rc == 0, "pthread_mutex_unlock failed: \(rc)")
            }
            return try body(value, mutex)
        }
    }
}
