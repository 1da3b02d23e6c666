/// What the background work of a store has done, for tests and metrics:
/// checkpoints and retention run off the commit path, so their failures
/// cannot be reported to a caller and are counted here instead.
struct StoreDiagnostics: Sendable, Equatable {
    var checkpoints = 0
    var checkpointFailures = 0
    var lastCheckpointError: StoreError?
    var pruneSteps = 0
    var prunedChanges = 0
    var prunedIdempotency = 0
    var pruneFailures = 0
    var lastPruneError: StoreError?
}

/// What the store's background work failed to do, for `/metrics`: a
/// checkpoint or a retention step that fails (a full disk) is retried on
/// its own, so nobody else would hear of it.
public struct StoreHealth: Sendable, Equatable {
    public var checkpointFailures: Int
    public var pruneFailures: Int

    public init(checkpointFailures: Int = 0, pruneFailures: Int = 0) {
        self.checkpointFailures = checkpointFailures
        self.pruneFailures = pruneFailures
    }
}

extension StoreDiagnostics {
    var health: StoreHealth {
        StoreHealth(checkpointFailures: checkpointFailures, pruneFailures: pruneFailures)
    }
}
