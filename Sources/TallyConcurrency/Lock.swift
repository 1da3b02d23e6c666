/// A mutual-exclusion lock that guards no value of its own (the shape of
/// swift-nio's `NIOLock`). Prefer `LockedValueBox`, which ties the lock to
/// what it protects; use `Lock` where the protected state cannot move into
/// one (C state, several objects).
///
/// A copy of a `Lock` is the same lock. The mutex lives at a stable heap
/// address (see `LockStorage`).
///
/// `@unchecked Sendable`: a mutex is made to be shared between threads (its
/// storage, a `ManagedBuffer`, cannot say so itself).
public struct Lock: @unchecked Sendable {
    @usableFromInline
    let storage: LockStorage<Void>

    public init() {
        storage = .make(())
    }

    /// Takes the lock, blocking until it is free. Pair with `unlock` on the
    /// same thread; `withLock` does both.
    @inlinable
    public func lock() { storage.lock() }

    @inlinable
    public func unlock() { storage.unlock() }

    /// Runs `body` with the lock held.
    @inlinable
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        storage.lock()
        defer { storage.unlock() }
        return try body()
    }
}
