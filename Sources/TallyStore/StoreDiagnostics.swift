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
