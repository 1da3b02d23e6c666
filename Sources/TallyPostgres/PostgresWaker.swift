@preconcurrency import Glibc
import CLinuxShim

/// Wakes a thread blocked in `PostgresConnection.waitForNotifications` from
/// any other thread: an eventfd the wait polls beside the connection's
/// socket. A listener thread that must stop (the hub shuts down) is woken
/// with `wake()` instead of waiting out its timeout.
///
/// Wake-ups coalesce: several `wake()`s before the waiter runs end one wait.
package final class PostgresWaker: Sendable {
    let descriptor: Int32

    package init() throws(PostgresError) {
        let descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard descriptor >= 0 else {
            throw .usage("eventfd failed: \(String(cString: strerror(errno)))", operation: "make a waker")
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Ends the current (or the next) wait with `.woken`.
    package func wake() {
        var one: UInt64 = 1
        // EAGAIN means the counter is saturated: a wake-up is pending anyway.
        _ = write(descriptor, &one, MemoryLayout<UInt64>.size)
    }

    /// Waits up to `timeoutMillis` for a wake-up: true when woken (the
    /// wake-up is taken), false when the time passed. For a thread that has
    /// no connection to wait on, between attempts to reach the server.
    package func wait(timeoutMillis: Int) -> Bool {
        var descriptor = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let deadline = PostgresConnection.monotonicMillis() + Int64(max(timeoutMillis, 0))
        while true {
            let remaining = max(deadline - PostgresConnection.monotonicMillis(), 0)
            let ready = poll(&descriptor, 1, Int32(min(remaining, Int64(Int32.max))))
            if ready > 0 {
                drain()
                return true
            }
            if ready == 0 || (ready < 0 && errno != EINTR) || remaining == 0 { return false }
        }
    }

    /// Resets the counter, so one wake-up ends one wait.
    func drain() {
        var count: UInt64 = 0
        _ = read(descriptor, &count, MemoryLayout<UInt64>.size)
    }
}
