/// N event loops, each on its own thread.
public final class EventLoopGroup: Sendable {
    public let loops: [EventLoop]
    let metrics: [LoopMetrics]
    private let cursor = Synchronization.Atomic<Int>(0)

    /// - Parameter clock: where the loops read the time (timers, timeouts);
    ///   tests pass a `ManualClock`.
    public init(threads: Int, clock: any LoopClock = MonotonicClock()) throws(SystemError) {
        var loops: [EventLoop] = []
        var metrics: [LoopMetrics] = []
        for id in 0..<max(1, threads) {
            let m = LoopMetrics()
            metrics.append(m)
            loops.append(try EventLoop(id: id, metrics: m, clock: clock))
        }
        self.loops = loops
        self.metrics = metrics
        for loop in loops { try loop.start() }
    }

    /// The next loop, round robin (for client connections).
    public func next() -> EventLoop {
        loops[cursor.add(1, ordering: .relaxed).oldValue % loops.count]
    }

    private let stopped = Atomic<Bool>(false)

    /// Stops every loop and waits for their threads. Later calls do nothing.
    public func shutdown() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for loop in loops { loop.stop() }
        for loop in loops { loop.join() }
    }

    /// The network counters summed over every loop.
    public func metricsSnapshot() -> NetMetricsSnapshot {
        var snapshot = NetMetricsSnapshot()
        for m in metrics {
            for counter in NetCounter.allCases { snapshot[counter] += m.value(counter) }
        }
        return snapshot
    }
}

import Synchronization
