// swift-tools-version:6.0
// libFuzzer targets for Tally's pure protocol modules and its photo decoding. A package of its own so
// the main package's `swift build` / `swift test` never see sanitizer flags.
//
// The module sources (and the system-library module maps they need)
// are reached through symlinks in Sources/ that point at ../../Sources/…: the
// fuzzers always build the code as it is in the work tree.
//
// Build and run through ./run.sh, which adds `-sanitize=fuzzer,address`.
// A plain `swift build` here fails to link (LLVMFuzzerRunDriver comes from the
// libFuzzer runtime that only `-sanitize=fuzzer` links in).
import PackageDescription

// The same settings the main package compiles these modules with.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "TallyFuzz",
    targets: [
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", pkgConfig: "zlib",
                       providers: [.apt(["zlib1g-dev"])]),
        // The photo libraries TallyImaging wraps (Debian builds, not instrumented:
        // coverage comes from TallyImaging's own Swift code).
        .systemLibrary(name: "CVips", path: "Sources/CVips", pkgConfig: "vips",
                       providers: [.apt(["libvips-dev", "libheif-dev"])]),
        .systemLibrary(name: "CZBar", path: "Sources/CZBar", pkgConfig: "zbar",
                       providers: [.apt(["libzbar-dev"])]),
        .systemLibrary(name: "CDmtx", path: "Sources/CDmtx", pkgConfig: "libdmtx",
                       providers: [.apt(["libdmtx-dev"])]),
        .systemLibrary(name: "CTesseract", path: "Sources/CTesseract", pkgConfig: "tesseract",
                       providers: [.apt(["libtesseract-dev", "tesseract-ocr-eng"])]),
        .target(name: "TallyHTTP", path: "Sources/TallyHTTP", swiftSettings: strict),
        .target(name: "TallyProtocol", path: "Sources/TallyProtocol", swiftSettings: strict),
        .target(name: "TallyEngine", dependencies: ["TallyProtocol"], path: "Sources/TallyEngine",
                swiftSettings: strict),
        .target(name: "TallyWebSocket", dependencies: ["COpenSSL", "CZlib"],
                path: "Sources/TallyWebSocket", swiftSettings: strict),
        .target(name: "TallyImaging", dependencies: ["CVips", "CZBar", "CDmtx", "CTesseract"],
                path: "Sources/TallyImaging", swiftSettings: strict),

        // Shared driver glue (LLVMFuzzerRunDriver, invariant checks, chunking).
        .target(name: "FuzzSupport", path: "Sources/FuzzSupport"),

        .executableTarget(name: "FuzzFrameDecoder", dependencies: ["TallyWebSocket", "FuzzSupport"],
                          path: "Sources/FuzzFrameDecoder"),
        .executableTarget(name: "FuzzHTTPParser", dependencies: ["TallyHTTP", "FuzzSupport"],
                          path: "Sources/FuzzHTTPParser"),
        .executableTarget(name: "FuzzJSON", dependencies: ["TallyProtocol", "FuzzSupport"],
                          path: "Sources/FuzzJSON"),
        .executableTarget(name: "FuzzEngine", dependencies: ["TallyEngine", "TallyProtocol", "FuzzSupport"],
                          path: "Sources/FuzzEngine"),
        .executableTarget(name: "FuzzImageDecoder", dependencies: ["TallyImaging", "FuzzSupport"],
                          path: "Sources/FuzzImageDecoder"),
    ]
)
