@preconcurrency import Glibc
import TallyTestSupport
import Testing
@testable import TallyStore

/// Throughput by hand: `TALLY_STORE_BENCH=1 swift test -c release --filter StoreBenchmark`.
/// Skipped otherwise. `TALLY_STORE_BENCH_OPEN=1000000` also times reopening a
/// store with that many records.
@Suite(.serialized) struct StoreBenchmark {
    static let enabled = getenv("TALLY_STORE_BENCH") != nil

    /// 100k small units (a record and a change each) from 4 threads, each
    /// submitting 100 units and waiting for their commit before the next 100,
    /// as sessions waiting for acknowledgements do; synchronous=FULL.
    @Test(.enabled(if: enabled), arguments: [Durability.full, .normal])
    func groupCommitThroughput(durability: Durability) throws {
        let h = try StoreHarness(.sqlite, durability: durability)
        let total = 100_000
        let threads = 4
        let batch = 100
        let sequencer = Sequencer(store: h.store)
        let recorder = h.recorder
        let started = monotonicNanos()
        var workers: [pthread_t] = []
        for t in 0..<threads {
            workers.append(try StoreThread.spawn(name: "bench") {
                for round in 0..<(total / threads / batch) {
                    var last: UInt64 = 0
                    for i in 0..<batch {
                        last = sequencer.submit { seq in
                            let name = "bench/\(t)/\(round * batch + i)"
                            return StoreUnit(mutations: [.putRecord(StoredRecord(
                                name: name, version: 1, seq: seq, created: 1_700_000_000_000,
                                updated: 1_700_000_000_000, data: Array("{\"n\":\(seq),\"who\":\"bench\"}".utf8)))],
                                changes: [StoredChange(seq: seq, time: 1_700_000_000_000, kind: .record, name: name,
                                                       message: Array("{\"op\":\"set\",\"seq\":\(seq),\"name\":\"\(name)\"}".utf8))],
                                token: UInt64(seq))
                        }
                    }
                    _ = try? recorder.wait(for: [last], seconds: 60)
                }
            })
        }
        for worker in workers { StoreThread.join(worker) }
        let seconds = Double(monotonicNanos() - started) / 1e9
        let commits = h.recorder.all
        #expect(commits.allSatisfy { $0.error == nil })
        #expect(commits.flatMap(\.tokens).count == total)
        let meanNanos = commits.map { Double($0.durationNanos) }.reduce(0, +) / Double(commits.count)
        print("""
            TallyStore bench (\(durability)): \(total) units from \(threads) threads in batches of \(batch): \
            \(String(Int(Double(total) / seconds))) units/s, \(commits.count) commits, \
            \(total / max(1, commits.count)) units/commit, mean commit \(Int(meanNanos / 1_000)) µs
            """)
    }

    @Test(.enabled(if: enabled && getenv("TALLY_STORE_BENCH_OPEN") != nil))
    func reopeningIsIndependentOfSize() throws {
        let count = Int(String(cString: getenv("TALLY_STORE_BENCH_OPEN"))) ?? 1_000_000
        let directory = try TemporaryDirectory(prefix: "tally-store-bench")
        do {
            let h = try StoreHarness(.sqlite, directory: directory, durability: .off)
            let chunk = 10_000
            for start in stride(from: 0, to: count, by: chunk) {
                let units = (start..<min(count, start + chunk)).map { i in
                    h.unit([.putRecord(record("r/\(i)", seq: Int64(i + 1)))], changes: [change(Int64(i + 1), .record, "r/\(i)")])
                }
                try h.commit(units)
            }
            h.store.close()
        }
        let began = monotonicNanos()
        let store = try SQLiteStore(directory: directory.path)
        let reader = try store.makeReader()
        let opened = monotonicNanos()
        _ = try reader.record("r/1")
        store.close()
        print("TallyStore bench: opening a store with \(count) records and changes took \((opened - began) / 1_000) µs")
    }
}

/// Assigns change seqs in submission order, as the hub's single engine
/// thread would.
final class Sequencer: @unchecked Sendable {
    private let store: any Store
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var seq: Int64 = 0

    init(store: any Store) {
        self.store = store
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func submit(_ make: (Int64) -> StoreUnit) -> UInt64 {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        seq += 1
        let unit = make(seq)
        store.submit(unit)
        return unit.token
    }
}
