@preconcurrency import Glibc

/// CLOCK_MONOTONIC in milliseconds, for deadlines.
public func monotonicMillis() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// Polls `condition` every `intervalMillis` until it holds; throws a
/// `TestFailure` naming `what` once `timeoutMillis` have passed. For work
/// another thread finishes: the wait ends as soon as it is done, and a
/// test that would hang fails instead.
public func poll(_ what: String, timeoutMillis: Int, intervalMillis: Int = 10,
                 until condition: () throws -> Bool) async throws {
    let deadline = monotonicMillis() + Int64(timeoutMillis)
    while true {
        if try condition() { return }
        if monotonicMillis() > deadline { throw TestFailure("timed out waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(intervalMillis))
    }
}

/// `poll` for synchronous tests: checks `condition` every `intervalMillis`
/// (blocking the calling thread in between) until it holds, and throws a
/// `TestFailure` naming `what` once `timeoutMillis` have passed.
public func waitUntil(_ what: String, timeoutMillis: Int, intervalMillis: Int = 1,
                      _ condition: () throws -> Bool) throws {
    let deadline = monotonicMillis() + Int64(timeoutMillis)
    while true {
        if try condition() { return }
        if monotonicMillis() > deadline { throw TestFailure("timed out waiting for \(what)") }
        usleep(UInt32(intervalMillis) * 1_000)
    }
}
