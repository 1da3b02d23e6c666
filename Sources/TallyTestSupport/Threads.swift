@preconcurrency import Glibc

/// Runs `body(index)` on `count` new threads and waits for all of them:
/// real threads, not tasks, for code whose objects have one owner thread
/// (a connection) or that blocks (locks, conditions).
public func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    final class Job: @unchecked Sendable {  // handed to exactly one thread
        let index: Int
        let body: @Sendable (Int) -> Void
        init(_ index: Int, _ body: @escaping @Sendable (Int) -> Void) { self.index = index; self.body = body }
    }
    var threads: [pthread_t] = []
    for index in 0..<count {
        var thread = pthread_t()
        let job = Unmanaged.passRetained(Job(index, body))
        let rc = pthread_create(&thread, nil, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            job.body(job.index)
            return nil
        }, job.toOpaque())
        precondition(rc == 0, "pthread_create: \(rc)")
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
}
