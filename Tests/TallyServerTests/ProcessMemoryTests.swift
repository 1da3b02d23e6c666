@preconcurrency import Glibc
import Testing
import TallyBench
import TallyServer

@Suite("Process memory")
struct ProcessMemoryTests {
    /// A freed decode buffer leaves the process. Without the fixed
    /// threshold glibc, having seen the first (30 MiB) block freed, raises
    /// its mmap threshold past 20 MiB, and the second block, freed, stays
    /// resident in the arena.
    @Test func freedBlocksOfAMebibyteOrMoreGoBackToTheSystem() throws {
        ProcessMemory.returnLargeFreedBlocks()
        var stayed: [Int] = []
        for mebibytes in [30, 20] {
            let size = mebibytes << 20
            let before = try #require(residentKiB(pid: getpid()))
            let block = try #require(malloc(size))
            memset(block, 1, size)
            let held = try #require(residentKiB(pid: getpid())) - before
            free(block)
            let after = try #require(residentKiB(pid: getpid())) - before
            #expect(held > size / 1024 / 2, "the block was not resident while held: \(held) KiB")
            stayed.append(after)
        }
        #expect(stayed.allSatisfy { $0 < 10 << 10 }, "KiB still resident after each free: \(stayed)")
    }
}
