@preconcurrency import Glibc
import CLinuxShim
import Synchronization
import TallyConcurrency

/// Something registered with an event loop for readiness on one descriptor.
/// Confined to its loop's thread.
protocol EventSource: AnyObject {
    /// Called on the loop thread with the epoll event bits that fired.
    func handleEvents(_ events: UInt32)
}

/// One epoll loop on one thread.
///
/// Everything a loop owns (its registrations, timers, connections, scratch
/// buffers) is touched only on its own thread; other threads reach it only
/// through `execute`, which appends to a `Mailbox` and wakes the loop through
/// an eventfd. `@unchecked Sendable` because the only members other threads
/// call are `execute`, `inEventLoop` and `id` (use `LoopBound` to carry the
/// loop's objects across threads: it asserts the rule in debug builds).
public final class EventLoop: @unchecked Sendable {
    public let id: Int
    let epfd: Int32
    private let wakeFD: Int32
    private let mailbox = Mailbox<@Sendable () -> Void>()
    /// The tasks being run; swapped with the mailbox's array each drain.
    private var draining: [@Sendable () -> Void] = []
    private let wakePending = Atomic<Bool>(false)
    /// The loop thread's pthread id (0 before it starts); atomic so other
    /// threads can ask `inEventLoop` without racing the start.
    private let threadID = Atomic<UInt>(0)
    private var running = false

    // Loop-confined state. The members touched per message skip the runtime
    // exclusivity check (see `Connection.outbound`): one thread, no nested access.
    @exclusivity(unchecked) private var sources: [(any EventSource)?] = []
    private var timers = TimerHeap()
    @exclusivity(unchecked) private var flushQueue: [Connection] = []
    @exclusivity(unchecked) private var iterationEndHooks: [() -> Void] = []
    @exclusivity(unchecked) private var runningHooks: [() -> Void] = []
    /// Work the loop gave itself (a task in its own mailbox, an iteration-end
    /// hook) since it last drained: it must not block in `epoll_wait` then.
    @exclusivity(unchecked) private var hasLocalWork = false
    /// The batch being flushed; swapped with `flushQueue` so neither array
    /// is reallocated per loop iteration.
    @exclusivity(unchecked) private var flushing: [Connection] = []
    /// Where time comes from (the monotonic clock, or a test's manual one).
    let clock: any LoopClock
    /// The clock's milliseconds, read once per loop iteration (cheap
    /// timestamps for activity tracking on the hot path).
    private(set) var now: Int64
    /// Connections owned by this loop (for shutdown).
    var connectionCount = 0
    /// How often the timeout sweep runs on this loop (nil: not yet started).
    var sweepIntervalMillis: Int64?
    /// Set when the server shuts down: no new WebSockets are opened.
    var isShuttingDown = false
    /// One read buffer per loop, shared by every connection on it: an idle
    /// connection holds no read buffer at all (RFC-independent design point:
    /// memory per idle connection is the benchmark that matters).
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Scratch iovec array for vectored writes.
    let iovecs: UnsafeMutablePointer<iovec>
    static let maxIOVecs = 64
    /// Loop-local counters, summed across loops by `NetMetrics`.
    let metrics: LoopMetrics

    init(id: Int, metrics: LoopMetrics, clock: any LoopClock = MonotonicClock()) throws(SystemError) {
        self.id = id
        self.metrics = metrics
        self.clock = clock
        self.now = clock.nowMillis()
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else { throw SystemError("epoll_create1", errno: errno) }
        let ev = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard ev >= 0 else { Sys.close(ep); throw SystemError("eventfd", errno: errno) }
        epfd = ep
        wakeFD = ev
        readBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        iovecs = .allocate(capacity: EventLoop.maxIOVecs)
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = ev
        guard epoll_ctl(ep, EPOLL_CTL_ADD, ev, &event) == 0 else {
            throw SystemError("epoll_ctl(eventfd)", errno: errno)
        }
    }

    deinit {
        Sys.close(epfd)
        Sys.close(wakeFD)
        readBuffer.deallocate()
        iovecs.deallocate()
    }

    /// Whether the caller runs on this loop's thread.
    public var inEventLoop: Bool {
        threadID.load(ordering: .relaxed) == UInt(pthread_self())
    }

    /// Runs `task` on the loop thread, soon. Safe from any thread.
    public func execute(_ task: @escaping @Sendable () -> Void) {
        mailbox.post(task)
        // From the loop itself there is nobody to wake: the loop drains its
        // mailbox before it waits again (see `hasLocalWork`).
        if inEventLoop {
            hasLocalWork = true
            return
        }
        // Coalesce wake-ups: only the first poster after a drain writes the eventfd.
        if !wakePending.exchange(true, ordering: .acquiringAndReleasing) {
            var one: UInt64 = 1
            _ = Glibc.write(wakeFD, &one, 8)
        }
    }

    // MARK: Registration (loop thread only)

    func register(_ source: any EventSource, fd: Int32, events: UInt32) throws(SystemError) {
        if Int(fd) >= sources.count {
            sources.append(contentsOf: repeatElement(nil, count: max(Int(fd) + 1 - sources.count, sources.count)))
        }
        sources[Int(fd)] = source
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        guard epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 else {
            sources[Int(fd)] = nil
            throw SystemError("epoll_ctl(ADD)", errno: errno)
        }
    }

    func modify(fd: Int32, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        _ = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event)
    }

    func deregister(fd: Int32) {
        _ = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
        if Int(fd) < sources.count { sources[Int(fd)] = nil }
    }

    /// Every registered source (for sweeps and shutdown).
    func forEachSource(_ body: (any EventSource) -> Void) {
        for case let source? in sources { body(source) }
    }

    // MARK: Timers (loop thread only)

    /// Calls `body` on the loop thread after `millis`. Returns an id for `cancelTimer`.
    @discardableResult
    func scheduleTimer(afterMillis millis: Int64, _ body: @escaping () -> Void) -> UInt64 {
        timers.schedule(at: clock.nowMillis() + millis, body)
    }

    func cancelTimer(_ id: UInt64) { timers.cancel(id) }

    /// Runs `body` once, on the loop thread, after the events of the current
    /// iteration were handled (before the mailbox, the timers and the
    /// flushes): lets a consumer gather what one iteration produced and hand
    /// it on in one piece. Loop thread only.
    public func atIterationEnd(_ body: @escaping () -> Void) {
        iterationEndHooks.append(body)
    }

    /// Asks for `connection.flush()` at the end of this loop iteration, so
    /// frames queued during one iteration leave in one vectored write.
    func requestFlush(_ connection: Connection) {
        flushQueue.append(connection)
    }

    // MARK: Running

    /// Starts the loop on a new thread.
    func start() throws(SystemError) {
        let box = Unmanaged.passRetained(self)
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            let loop = Unmanaged<EventLoop>.fromOpaque(raw!).takeRetainedValue()
            loop.run()
            return nil
        }, box.toOpaque())
        guard rc == 0 else { box.release(); throw SystemError("pthread_create", errno: rc) }
        joinable = tid
    }
    private var joinable: pthread_t?

    /// Waits for the loop thread to end (after `stop`).
    func join() {
        if let joinable { pthread_join(joinable, nil) }
    }

    /// Ends the loop after the current iteration. Safe from any thread.
    func stop() {
        execute { [self] in running = false }
    }

    private func run() {
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        running = true
        let maxEvents = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: maxEvents)
        defer { events.deallocate() }
        while running {
            let timeout = hasLocalWork || !iterationEndHooks.isEmpty
                ? 0 : clock.waitMillis(until: timers.nextDeadline, now: clock.nowMillis())
            let n = epoll_wait(epfd, events, Int32(maxEvents), timeout)
            now = clock.nowMillis()
            if n < 0 {
                if errno == EINTR { continue }
                break
            }
            for i in 0..<Int(n) {
                let fd = events[i].data.fd
                if fd == wakeFD {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                    continue
                }
                if Int(fd) < sources.count, let source = sources[Int(fd)] {
                    source.handleEvents(events[i].events)
                }
            }
            runIterationEndHooks()
            runMailbox()
            // Timer bodies may schedule timers: pop one at a time, run it outside the heap's mutation.
            while let body = timers.popExpired(now: now) { body() }
            runIterationEndHooks()
            flushPending()
        }
        // What the last iteration gathered still leaves (a close posted to a
        // consumer, say).
        runIterationEndHooks()
    }

    private func runIterationEndHooks() {
        // A hook may add hooks: run until none is left.
        while !iterationEndHooks.isEmpty {
            swap(&iterationEndHooks, &runningHooks)
            for hook in runningHooks { hook() }
            runningHooks.removeAll(keepingCapacity: true)
        }
    }

    private func runMailbox() {
        // Drain everything: eventfd wake-ups coalesce, so one wake may stand for many posts.
        wakePending.store(false, ordering: .releasing)
        hasLocalWork = false
        guard mailbox.takeAll(into: &draining) else { return }
        for task in draining { task() }
        // Let go of what the tasks captured now, not at the next drain.
        draining.removeAll(keepingCapacity: true)
    }

    private func flushPending() {
        guard !flushQueue.isEmpty else { return }
        // A flush can queue more (a close after a failed write); loop until quiet.
        while !flushQueue.isEmpty {
            swap(&flushQueue, &flushing)
            for connection in flushing { connection.flush() }
            flushing.removeAll(keepingCapacity: true)
        }
    }
}

/// A binary min-heap of deadlines. Cancelled timers are skipped lazily.
struct TimerHeap {
    private struct Entry { var deadline: Int64; var id: UInt64; var body: () -> Void }
    private var heap: [Entry] = []
    /// Ids of timers scheduled and neither run nor cancelled; a cancelled
    /// entry stays in the heap until its deadline and is skipped then.
    private var pending: Set<UInt64> = []
    private var nextID: UInt64 = 1

    mutating func schedule(at deadline: Int64, _ body: @escaping () -> Void) -> UInt64 {
        let id = nextID
        nextID += 1
        heap.append(Entry(deadline: deadline, id: id, body: body))
        pending.insert(id)
        siftUp(heap.count - 1)
        return id
    }

    /// Timers scheduled and not yet run or cancelled.
    var pendingCount: Int { pending.count }

    /// Cancelling a timer that already ran (or an unknown id) does nothing.
    mutating func cancel(_ id: UInt64) { pending.remove(id) }

    /// When the earliest timer is due (cancelled ones included: waking for
    /// one costs a loop iteration, not a wrong answer).
    var nextDeadline: Int64? { heap.first?.deadline }

    func millisUntilNext(now: Int64) -> Int32 {
        MonotonicClock().waitMillis(until: nextDeadline, now: now)
    }

    /// The next due timer's body, or nil when none is due.
    mutating func popExpired(now: Int64) -> (() -> Void)? {
        while let first = heap.first, first.deadline <= now {
            let entry = popFirst()
            guard pending.remove(entry.id) != nil else { continue }
            return entry.body
        }
        return nil
    }

    private mutating func popFirst() -> Entry {
        let first = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return first
    }

    private mutating func siftUp(_ index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ index: Int) {
        var parent = index
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
