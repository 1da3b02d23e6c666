@preconcurrency import Glibc
import TallyNet
import TallyStore

/// Who does the hub core's work, and on which thread: flat combining and
/// commit in place, in one place (ARCHITECTURE.md, "The sync engine").
///
/// The runner owns the core's mailbox (`CoreMailbox`), one inbox per event
/// loop and the core thread. What it runs is `HubCore.process`, one batch
/// at a time, on exactly one thread at a time:
///
/// - **The core thread** takes everything queued at once (`run`).
/// - **A loop at its iteration's end** hands over what its connections
///   posted during the iteration (`post(from:)`, `handOver`). A batch of
///   quick work (`Input.isQuick`) is done right there when nobody holds the
///   core and nothing waits (`combine`); anything else queues for the core
///   thread.
/// - **The store's writer** (or a loop that committed in place) reports a
///   commit the same way: done in place when the core is free.
///
/// Commit in place: when a loop did the work in place and the store can
/// lend its writer (`InPlaceCommitting`), the units the batch made are
/// queued without waking the writer, and after the core is let go the loop
/// commits them itself (`commitQueued`), handling the report in place too.
/// A store that cannot lend gets every unit through `Store.submit`.
///
/// `@unchecked Sendable`: the mailbox is a `ConditionLock`, each inbox is
/// touched only by its own loop (`post(from:)` checks `inEventLoop`), and
/// the rest is immutable.
final class CoreRunner: @unchecked Sendable {
    typealias Input = HubCore.Input

    private let mailbox = CoreMailbox<Input>()
    /// One per event loop (indexed by loop id), each touched only by its loop.
    private let inboxes = (0..<64).map { _ in LoopInbox() }
    /// The store, when it can commit in place; nil for a backend whose
    /// commits stay on its own threads.
    let inPlaceStore: (any InPlaceCommitting)?

    init(store: any Store) {
        inPlaceStore = store as? any InPlaceCommitting
    }

    /// Starts the store's writer, its commit reports routed through
    /// `combine`, and the core thread, which runs `core` until a stop.
    func start(_ core: HubCore) {
        // A commit report is handled on the thread that committed (the
        // writer, or a loop that committed in place) when the core is idle:
        // one thread wake-up less per commit. Not for a store shared with
        // other hubs: there a report may catch up on their changes, run
        // writes again and release waiting reads (HubCore+SharedStore.swift),
        // work for the core thread rather than the store's writer, which
        // has the next group to commit.
        if core.shared != nil {
            core.store.start { [mailbox] outcome in mailbox.post(.committed(outcome)) }
        } else {
            core.store.start { [self] outcome in combine([.committed(outcome)], core) }
        }
        let box = Unmanaged.passRetained(CoreThreadStart(runner: self, core: core))
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let start = Unmanaged<CoreThreadStart>.fromOpaque(raw!).takeRetainedValue()
            start.runner.run(start.core)
            return nil
        }, box.toOpaque())
        precondition(rc == 0, "cannot start the core thread: error \(rc)")
        pthread_detach(thread)
    }

    /// Queues `input` for the core thread, from any thread.
    func post(_ input: Input) { mailbox.post(input) }

    /// Posts from a loop thread. What one loop iteration posts is gathered
    /// and handed over at the iteration's end in one piece — and, when the
    /// core is idle and the batch is quick work, done right there on the
    /// loop thread, so a lone write or publish wakes no other thread before
    /// its deliveries.
    func post(from loop: EventLoop, _ input: Input, to core: HubCore) {
        // The inbox is the loop's own: from anywhere else (or past the
        // inboxes there are), post directly.
        guard loop.id < inboxes.count, loop.inEventLoop else { return mailbox.post(input) }
        let inbox = inboxes[loop.id]
        if inbox.items.isEmpty { loop.atIterationEnd { [self] in handOver(inbox, core) } }
        inbox.items.append(input)
        if !input.isQuick { inbox.quick = false }
    }

    private func handOver(_ inbox: LoopInbox, _ core: HubCore) {
        swap(&inbox.items, &inbox.taken)
        let quick = inbox.quick
        inbox.quick = true
        if quick {
            combine(inbox.taken, core, commitHere: true)
        } else {
            mailbox.post(contentsOf: inbox.taken)
        }
        inbox.taken.removeAll(keepingCapacity: true)
    }

    /// Does `batch` on this thread if the core is idle, else queues it for
    /// the core thread. With `commitHere` (a loop at its iteration's end)
    /// the store units it makes are committed on this thread too when the
    /// store can commit in place and its writer is idle — after the core is
    /// let go, so that the commit's I/O holds up nobody else's core work and
    /// its report can be handled here as well.
    private func combine(_ batch: [Input], _ core: HubCore, commitHere: Bool = false) {
        guard mailbox.claim(orPost: batch) else { return }
        core.metrics.coreBatchesInPlace.add(1, ordering: .relaxed)
        let lender = commitHere ? inPlaceStore : nil
        let (stopped, submitted) = core.process(batch, committingIn: lender)
        assert(stopped == nil, "only the core thread takes a stop")
        mailbox.release()
        if submitted, let lender { lender.commitQueued() }
    }

    /// The core thread: takes everything queued at once, until a stop.
    private func run(_ core: HubCore) {
        var spare: [Input] = []
        while true {
            let batch = mailbox.takeAll(reusing: &spare)
            core.metrics.coreBatchesQueued.add(1, ordering: .relaxed)
            if let stopped = core.process(batch).stopped {
                core.store.close()
                stopped()
                return
            }
        }
    }
}

/// What the core thread starts with, passed through pthread_create.
private final class CoreThreadStart {
    let runner: CoreRunner
    let core: HubCore

    init(runner: CoreRunner, core: HubCore) {
        self.runner = runner
        self.core = core
    }
}

/// What one loop's connections posted to the core during the loop's current
/// iteration. Loop thread only (`post(from:)` checks `inEventLoop` before
/// touching one), so not Sendable.
final class LoopInbox {
    var items: [HubCore.Input] = []
    /// The batch being handed over (swapped with `items`, storage reused).
    var taken: [HubCore.Input] = []
    /// Whether everything in `items` is quick (see `Input.isQuick`).
    var quick = true
}

extension HubCore.Input {
    /// Work short enough to do on a loop thread: no snapshot, replay or scan,
    /// which may read thousands of rows and would hold up the loop's other
    /// connections. Those go to the core thread.
    var isQuick: Bool {
        switch self {
        case .open, .close, .refused, .committed: true
        case .request(_, let request):
            switch request.operation {
            case .get(.prefix): false
            case .subscribe(.prefix, _): false
            case .subscribe(_, let since): since == nil
            case .hello, .get, .unsubscribe, .write, .publish, .report: true
            }
        case .rest, .stop, .system, .analyzed, .scan, .query, .headAdvanced, .clientRows: false
        }
    }
}

