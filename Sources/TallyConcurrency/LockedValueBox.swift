/// A value that is only reached with its lock held (the shape of swift-nio's
/// `NIOLockedValueBox`): the one way Tally shares mutable state between
/// threads outside the event loops' mailboxes.
///
/// A copy of the box is the same box. Sendable when the value is: what goes
/// in may come out on another thread.
public struct LockedValueBox<Value> {
    @usableFromInline
    let storage: LockStorage<Value>

    public init(_ value: Value) {
        storage = .make(value)
    }

    /// Runs `body` on the value with the lock held. Keep it short and do not
    /// take another lock inside it unless every thread takes the two in the
    /// same order.
    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try storage.withLockedValue(body)
    }
}

/// `@unchecked`: the value is reached only with the lock held (the storage,
/// a `ManagedBuffer`, cannot be Sendable itself).
extension LockedValueBox: @unchecked Sendable where Value: Sendable {}
