import Dispatch
@preconcurrency import Glibc
import Synchronization
import Testing
import TallyMirror
import TallyTestSupport

@Suite struct MirrorRunLockTests {
    @Test func oneRunPerStoreAndTheLockGoesWithItsHolder() throws {
        let directory = try TemporaryDirectory(prefix: "tally-runlock")
        let store = "\(directory.path)/m.sqlite"
        #expect(try MirrorRunLock.isHeld(store: store) == false, "no lock file: nobody runs")
        #expect(access("\(store).lock", F_OK) != 0, "asking creates no lock file")

        let first = try #require(try MirrorRunLock.acquire(store: store))
        #expect(try MirrorRunLock.isHeld(store: store))
        #expect(try MirrorRunLock.acquire(store: store) == nil, "a second run on the same store is refused")
        first.release()
        #expect(try MirrorRunLock.isHeld(store: store) == false)
        let second = try #require(try MirrorRunLock.acquire(store: store), "free again once released")
        second.release()
    }

    /// `mirror status` asks while `mirror run` starts. Asking must never
    /// take the lock, even for a moment, or the starting run finds it held
    /// and exits (it did, in CI: a test polled status as the run started).
    @Test func askingWhetherARunHoldsTheLockNeverTakesIt() throws {
        let directory = try TemporaryDirectory(prefix: "tally-runlock")
        let store = "\(directory.path)/m.sqlite"
        try #require(try MirrorRunLock.acquire(store: store)).release()  // the lock file exists from here on

        let stop = Atomic<Bool>(false)
        let probes = Atomic<Int>(0)
        let prober = DispatchGroup()
        DispatchQueue.global().async(group: prober) {
            while !stop.load(ordering: .relaxed) {
                _ = try? MirrorRunLock.isHeld(store: store)
                probes.add(1, ordering: .relaxed)
            }
        }
        defer {
            stop.store(true, ordering: .relaxed)
            prober.wait()
        }
        while probes.load(ordering: .relaxed) == 0 { sched_yield() }

        var refused = 0
        for _ in 0..<3000 {
            guard let lock = try MirrorRunLock.acquire(store: store) else {
                refused += 1
                continue
            }
            lock.release()
        }
        #expect(refused == 0, "\(refused) of 3000 acquisitions were refused while only probes ran")
        #expect(probes.load(ordering: .relaxed) > 0)
    }
}
