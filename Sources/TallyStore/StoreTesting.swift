// What tests reach inside a store, kept out of its production API: views
// of the writer's state and of the write connection. Everything here, like
// `StoreTestHooks` and `LendingRule`, is `@_spi(Testing)`; a test imports
// it with `@_spi(Testing) import TallyStore`, and the hub cannot see it.

/// A view of a store's writer thread, for tests of commit in place that
/// must first wait until the writer has parked.
@_spi(Testing) public struct WriterProbe: Sendable {
    let committer: GroupCommitter

    /// The writer is parked with nothing to do and the store idle long
    /// enough, so that `commitQueued` would commit in place.
    public var wouldLend: Bool {
        committer.inspect { s, rule in s.queue.isEmpty && s.lends(now: monotonicNanos(), by: rule) }
    }

    /// The writer is parked with nothing queued.
    public var isParked: Bool {
        committer.inspect { s, _ in s.parkedWithNothingToDo }
    }

    /// The writer is parked and the store has been idle long enough to
    /// lend — how quick its last commit was aside, which a loaded machine
    /// decides.
    public var isParkedAndIdle: Bool {
        committer.inspect { s, rule in
            s.parkedWithNothingToDo && monotonicNanos() &- s.lastCommitEnded >= rule.afterIdleNanos
        }
    }
}

extension SQLiteStore {
    @_spi(Testing) public var writerProbe: WriterProbe { WriterProbe(committer: committer) }

    /// A pragma's value on the write connection, before `start`; nil after.
    @_spi(Testing) public func writerPragma(_ name: String) throws(StoreError) -> Int64? {
        try committer.withIdleBackend { backend throws(StoreError) in
            try (backend as? SQLiteWriter)?.pragma(name)
        } ?? nil
    }
}

extension MemoryStore {
    @_spi(Testing) public var writerProbe: WriterProbe { WriterProbe(committer: committer) }
}
