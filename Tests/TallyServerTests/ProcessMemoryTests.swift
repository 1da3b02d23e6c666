@preconcurrency import Glibc
import Testing
import TallyServer

@Suite("Process memory")
struct ProcessMemoryTests {
    /// A block of 1 MiB or more is mmapped on its own, so freeing it hands
    /// it back to the system. glibc's usable size tells which it got: an
    /// mmapped block runs to the end of its last page (size + 4080 for a
    /// whole number of pages), one from an arena has 8 bytes spare.
    /// Without the fixed threshold glibc, having seen the 30 MiB block
    /// freed, raises its threshold past 20 MiB, and the 20 MiB block comes
    /// from (and, freed, stays in) the arena. Checked on the blocks
    /// themselves, not the process's RSS, which other tests move. (A
    /// smaller block may still be cut from free space the arena already
    /// holds, which costs no memory: not checked.)
    @Test func freedBlocksOfAMebibyteOrMoreGoBackToTheSystem() throws {
        ProcessMemory.returnLargeFreedBlocks()
        for mebibytes in [30, 20] {
            let size = mebibytes << 20
            let block = try #require(malloc(size))
            let usable = mallocUsableSize(block)
            free(block)
            #expect(usable >= size + 4000, "a \(mebibytes) MiB block came from an arena (usable size \(usable))")
        }
    }
}

/// glibc's malloc_usable_size(3), which the Glibc module does not import.
@_silgen_name("malloc_usable_size")
private func mallocUsableSize(_ block: UnsafeMutableRawPointer) -> Int
