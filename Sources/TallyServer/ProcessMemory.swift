@preconcurrency import Glibc

/// How the hub process hands memory back to the system.
public enum ProcessMemory {
    /// Has glibc give every freed block of 1 MiB or more back to the
    /// system. Such blocks are mmapped on their own, but glibc raises that
    /// threshold (up to 32 MiB) the first time one is freed, and later
    /// ones stay in the arena of whichever thread freed them: the photo
    /// decoders' buffers (a grey 12 MP photo is 5 MB, a damaged one
    /// declaring 100 MP up to 400 MB) then kept a hub analysing photos at
    /// 600–770 MiB resident after ten minutes, against about 130–170 MiB
    /// with the threshold fixed (scripts/soak-analysis.py; BENCHMARKS.md,
    /// "Memory while analysing"). A fixed threshold also stops the raising.
    /// Process-wide: `tally serve` calls it once at start.
    public static func returnLargeFreedBlocks() {
        let mmapThreshold: Int32 = -3  // M_MMAP_THRESHOLD in <malloc.h>
        _ = mallopt(mmapThreshold, 1 << 20)
    }
}

/// glibc's mallopt(3), which the Glibc module does not import.
@_silgen_name("mallopt")
private func mallopt(_ parameter: Int32, _ value: Int32) -> Int32
