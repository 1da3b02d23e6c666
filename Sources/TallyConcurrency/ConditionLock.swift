@preconcurrency import Glibc

/// A value behind a lock, with a condition variable to wait on until the
/// value says it is time (the idea of swift-nio's `ConditionLock`, with a
/// predicate over the value instead of a fixed value to wait for).
///
/// The waiting side runs a closure under the lock until it returns a
/// result; the changing side changes the value under the lock and then
/// signals. Used where one thread must block for another: a store's writer
/// waiting for work, a countdown a shutdown waits on.
public struct ConditionLock<Value> {
    @usableFromInline
    let storage: LockStorage<Value>
    @usableFromInline
    let condition: ConditionStorage

    public init(_ value: Value) {
        storage = .make(value)
        condition = .make()
    }

    /// Runs `body` on the value with the lock held.
    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try storage.withLockedValue(body)
    }

    /// Runs `body` under the lock until it returns a result, waiting on the
    /// condition in between. `body` sees the value after every wake-up
    /// (spurious ones included), so it may also record that it is about to
    /// wait.
    @inlinable
    public func wait<Result>(until body: (inout Value) throws -> Result?) rethrows -> Result {
        try storage.withLockedPointers { value, mutex in
            while true {
                if let result = try body(&value.pointee) { return result }
                condition.wait(releasing: mutex)
            }
        }
    }

    /// As `wait(until:)`, giving up after `timeoutMillis` (measured on the
    /// monotonic clock): nil then.
    public func wait<Result>(timeoutMillis: Int, until body: (inout Value) throws -> Result?) rethrows -> Result? {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let nanos = Int(deadline.tv_nsec) + (timeoutMillis % 1000) * 1_000_000
        deadline.tv_sec += timeoutMillis / 1000 + nanos / 1_000_000_000
        deadline.tv_nsec = nanos % 1_000_000_000
        return try storage.withLockedPointers { value, mutex in
            while true {
                if let result = try body(&value.pointee) { return result }
                if !condition.wait(releasing: mutex, deadline: deadline) {
                    return try body(&value.pointee)
                }
            }
        }
    }

    /// Wakes one waiter. Change the value under the lock first; signalling
    /// after unlocking is allowed by POSIX and spares the woken thread from
    /// blocking on the mutex at once.
    @inlinable
    public func signal() { condition.signal() }

    /// Wakes every waiter.
    @inlinable
    public func broadcast() { condition.broadcast() }
}

/// `@unchecked`: the value is reached only with the lock held, and a
/// condition variable is made to be shared (the storages, `ManagedBuffer`s,
/// cannot be Sendable themselves).
extension ConditionLock: @unchecked Sendable where Value: Sendable {}

/// A pthread condition variable at a stable heap address, waiting on the
/// monotonic clock (so a timed wait does not jump with the wall clock).
///
@usableFromInline
final class ConditionStorage: ManagedBuffer<Void, pthread_cond_t> {
    @usableFromInline
    static func make() -> ConditionStorage {
        let buffer = create(minimumCapacity: 1) { _ in () }
        let storage = unsafeDowncast(buffer, to: ConditionStorage.self)
        storage.withUnsafeMutablePointerToElements { condition in
            condition.initialize(to: pthread_cond_t())
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            let rc = pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
            precondition(rc == 0, "pthread_cond_init failed: \(rc)")
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { condition in
            pthread_cond_destroy(condition)
            condition.deinitialize(count: 1)
        }
    }

    /// Releases `mutex` (which the caller holds), waits, and retakes it.
    @inlinable
    func wait(releasing mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        withUnsafeMutablePointerToElements { condition in
            let rc = pthread_cond_wait(condition, mutex)
            assert(rc == 0, "pthread_cond_wait failed: \(rc)")
        }
    }

    /// As `wait(releasing:)` until `deadline` (CLOCK_MONOTONIC); false when
    /// the deadline passed.
    @usableFromInline
    func wait(releasing mutex: UnsafeMutablePointer<pthread_mutex_t>, deadline: timespec) -> Bool {
        var deadline = deadline
        return withUnsafeMutablePointerToElements { condition in
            let rc = pthread_cond_timedwait(condition, mutex, &deadline)
            assert(rc == 0 || rc == ETIMEDOUT, "pthread_cond_timedwait failed: \(rc)")
            return rc != ETIMEDOUT
        }
    }

    @inlinable
    func signal() {
        withUnsafeMutablePointerToElements { _ = pthread_cond_signal($0) }
    }

    @inlinable
    func broadcast() {
        withUnsafeMutablePointerToElements { _ = pthread_cond_broadcast($0) }
    }
}
