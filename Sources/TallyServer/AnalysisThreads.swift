@preconcurrency import Glibc

/// Where the analyzer's threads run: at nice 19, and on CPUs of their own
/// when the hub may use more than one.
///
/// Measured with `tally bench analysis-fanout` on 2 cores (BENCHMARKS.md,
/// "Fan-out while the hub analyses"): with the analysis at nice 10 and a
/// libvips worker thread decoding for it, the two threads traded each 12 MP
/// photo across both cores and the fan-out p99 doubled; kept to the last
/// CPU, the same threads added a tenth. The decode now runs on the
/// analysis thread itself (`PhotoDecoder.grey`), which alone holds the p99;
/// the pinning stays to contain whatever threads the libraries start.
enum AnalysisThreads {
    /// The CPUs the analysis threads keep to for `settings`: the last
    /// `cpus` (default: one per worker) of those this process may use,
    /// leaving at least one to the event loops. Empty: any CPU (one
    /// usable CPU, or `cpus` 0).
    static func cpus(for settings: AnalysisSettings) -> [Int] {
        let wanted = settings.cpus ?? settings.workers
        let allowed = usableCPUs()
        guard wanted > 0, allowed.count > 1 else { return [] }
        return Array(allowed.suffix(min(wanted, allowed.count - 1)))
    }

    /// Called first thing on a new analysis thread: nice 19 (Linux keeps a
    /// nice value per thread, setpriority(2) NOTES), and `cpus` when not
    /// empty. Threads libvips starts from this one inherit both.
    static func settle(on cpus: [Int]) {
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(threadID()), 19)
        guard !cpus.isEmpty else { return }
        var mask = [UInt](repeating: 0, count: maskWords)
        for cpu in cpus where cpu < maskWords * UInt.bitWidth {
            mask[cpu / UInt.bitWidth] |= 1 << UInt(cpu % UInt.bitWidth)
        }
        _ = mask.withUnsafeMutableBytes { sched_setaffinity(0, $0.count, $0.baseAddress!) }
    }

    /// The CPUs the calling thread may run on (sched_getaffinity(2)), in
    /// order; empty when the call fails.
    static func usableCPUs() -> [Int] {
        var mask = [UInt](repeating: 0, count: maskWords)
        guard mask.withUnsafeMutableBytes({ sched_getaffinity(0, $0.count, $0.baseAddress!) }) == 0 else { return [] }
        return (0..<maskWords * UInt.bitWidth).filter { mask[$0 / UInt.bitWidth] & (1 << UInt($0 % UInt.bitWidth)) != 0 }
    }

    /// 1,024 CPUs, as glibc's cpu_set_t.
    private static let maskWords = 1024 / UInt.bitWidth
}

// glibc functions the Glibc module does not import (they need _GNU_SOURCE).

/// gettid(2) (glibc 2.30 and later): the id setpriority takes to renice one thread.
@_silgen_name("gettid")
private func threadID() -> Int32

@_silgen_name("sched_getaffinity")
private func sched_getaffinity(_ pid: Int32, _ size: Int, _ mask: UnsafeMutableRawPointer) -> Int32

@_silgen_name("sched_setaffinity")
private func sched_setaffinity(_ pid: Int32, _ size: Int, _ mask: UnsafeRawPointer) -> Int32
