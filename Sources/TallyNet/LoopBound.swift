/// A loop-confined value carried across threads (the shape of swift-nio's
/// `NIOLoopBound`): other threads may hold it and hand it back to its loop
/// (`execute`), and only code on that loop's thread reaches the value.
///
/// The rule is checked in debug builds: `value` and `init` assert that the
/// caller runs on `loop`'s thread. Release builds skip the check, so a
/// loop-bound value costs nothing on the hot path.
///
/// `@unchecked Sendable`: the value is reachable only through `value`,
/// whose check enforces the confinement that Sendable would otherwise.
public struct LoopBound<Value>: @unchecked Sendable {
    /// The loop whose thread may touch the value. Safe from any thread.
    public let loop: EventLoop
    @usableFromInline
    let unchecked: Value

    /// Binds `value` to `loop`; call on that loop's thread.
    @inlinable
    public init(_ value: Value, on loop: EventLoop) {
        assert(loop.inEventLoop, "LoopBound created off its loop's thread (loop \(loop.id))")
        self.loop = loop
        self.unchecked = value
    }

    /// The value. On `loop`'s thread only (asserted in debug builds).
    @inlinable
    public var value: Value {
        assert(loop.inEventLoop, "LoopBound touched off its loop's thread (loop \(loop.id))")
        return unchecked
    }

    /// Runs `body` with the value on the loop's thread, soon. Safe from any thread.
    @inlinable
    public func execute(_ body: @escaping @Sendable (Value) -> Void) {
        let bound = self
        loop.execute { body(bound.value) }
    }
}
