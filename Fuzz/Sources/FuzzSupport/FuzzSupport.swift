// Glue shared by the fuzz targets: the libFuzzer driver entry, invariant
// checks that survive -O, and a deterministic way to cut a stream into chunks.
#if canImport(Glibc)
import Glibc
#endif

/// libFuzzer's `int (*)(const uint8_t *Data, size_t Size)`.
public typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

/// `int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *, size_t))`,
/// from the libFuzzer runtime that `-sanitize=fuzzer` links in.
///
/// SwiftPM links executables with `--defsym main=<target>_main`, so libFuzzer's
/// own `main` is never used: each target defines `<target>_main` with
/// `@_cdecl` and hands control to the driver from there.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: FuzzCallback
) -> Int32

/// Runs libFuzzer with the process arguments; call from `<target>_main`.
public func runFuzzerDriver(argc: Int32, argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                            _ callback: FuzzCallback) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, callback)
}

/// An invariant: unlike `assert`, kept in release builds, and it names the
/// broken property before trapping (libFuzzer then saves the input).
@inline(__always)
public func check(_ condition: Bool, _ message: @autoclosure () -> String,
                  file: StaticString = #fileID, line: UInt = #line) {
    if !condition {
        fatalError("fuzz invariant violated: \(message())", file: file, line: line)
    }
}

/// TALLY_FUZZ_TRACE=1: the targets print what each input decoded to (for
/// replaying a seed or a reproducer by hand, never while fuzzing).
public let traceEnabled: Bool = {
    guard let value = getenv("TALLY_FUZZ_TRACE") else { return false }
    return String(cString: value) == "1"
}()

/// Prints when TALLY_FUZZ_TRACE=1.
public func trace(_ message: @autoclosure () -> String) {
    if traceEnabled { print(message()) }
}

/// Reads the fuzz input front to back: configuration bytes first, the rest is
/// the stream. Reading past the end yields zeros, so every input is usable.
public struct FuzzInput {
    public let bytes: [UInt8]
    public private(set) var position = 0

    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        if let data, size > 0 {
            bytes = Array(UnsafeBufferPointer(start: data, count: size))
        } else {
            bytes = []
        }
    }

    public mutating func byte() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    /// Everything not read yet.
    public var rest: ArraySlice<UInt8> { bytes[min(position, bytes.count)...] }
}

/// Deterministic chunk sizes (splitmix64 seeded from the input), so that a
/// saved crash replays exactly.
public struct Chunker {
    private var state: UInt64
    private let maxChunk: Int

    /// `selector` picks the spread of chunk sizes (tiny, small, medium,
    /// large); `seed` varies the sequence.
    public init(selector: UInt8, seed: UInt8) {
        state = 0x9E37_79B9_7F4A_7C15 &* (UInt64(seed) &+ 1)
        switch selector & 3 {
        case 0: maxChunk = 3
        case 1: maxChunk = 17
        case 2: maxChunk = 300
        default: maxChunk = 5000
        }
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// The next chunk size, 1...maxChunk.
    public mutating func nextSize() -> Int {
        1 + Int(next() % UInt64(maxChunk))
    }

    /// Cuts `count` bytes into consecutive ranges.
    public mutating func ranges(count: Int) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        var start = 0
        while start < count {
            let end = min(count, start + nextSize())
            ranges.append(start..<end)
            start = end
        }
        return ranges
    }
}

/// Whether `bytes` is well-formed UTF-8, decided by the standard library (an
/// independent implementation from the code under test).
public func isValidUTF8<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
    String(validating: bytes, as: UTF8.self) != nil
}
