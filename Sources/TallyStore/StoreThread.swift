@preconcurrency import Glibc

/// The store's own threads (the writer, the checkpointer) and the hub's
/// clients' publisher: plain pthreads, because each owns a blocking SQLite
/// or PostgreSQL connection for its whole life and must not occupy a Swift
/// concurrency or Dispatch worker.
package enum StoreThread {
    private final class Start: Sendable {
        let body: @Sendable () -> Void
        init(body: @escaping @Sendable () -> Void) {
            self.body = body
        }
    }

    /// Starts `body` on a new joinable thread. `name` is for error messages
    /// (Glibc does not import `pthread_setname_np`).
    package static func spawn(name: String, _ body: @escaping @Sendable () -> Void) throws(StoreError) -> pthread_t {
        let start = Unmanaged.passRetained(Start(body: body))
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            start.body()
            return nil
        }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            throw StoreError(code: 1 /* SQLITE_ERROR */, message: String(cString: strerror(rc)),
                             operation: "start thread \(name)")
        }
        return thread
    }

    package static func join(_ thread: pthread_t) {
        pthread_join(thread, nil)
    }

    static func isCurrent(_ thread: pthread_t) -> Bool {
        pthread_equal(thread, pthread_self()) != 0
    }
}
