// swift-tools-version:6.0
// Tally: a realtime sync hub. The target graph below is the architecture:
// pure protocol modules (TallyHTTP, TallyWebSocket) know nothing of sockets;
// TallyNet owns the event loops; TallyServer wires routes; `tally` is a thin CLI.
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Tally",
    products: [
        .executable(name: "tally", targets: ["tally"]),
        .library(name: "TallyNet", targets: ["TallyNet"]),
        .library(name: "TallyHTTP", targets: ["TallyHTTP"]),
        .library(name: "TallyWebSocket", targets: ["TallyWebSocket"]),
        .library(name: "TallyTLS", targets: ["TallyTLS"]),
        .library(name: "TallyProtocol", targets: ["TallyProtocol"]),
        .library(name: "TallyClient", targets: ["TallyClient"]),
    ],
    targets: [
        // C libraries from Debian, reached through module maps (see shim.h in each).
        .systemLibrary(name: "CLinuxShim", path: "Sources/CLinuxShim"),
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", pkgConfig: "zlib",
                       providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CVips", path: "Sources/CVips", pkgConfig: "vips",
                       providers: [.apt(["libvips-dev", "libheif-dev"])]),
        .systemLibrary(name: "CZBar", path: "Sources/CZBar", pkgConfig: "zbar",
                       providers: [.apt(["libzbar-dev"])]),
        .systemLibrary(name: "CDmtx", path: "Sources/CDmtx", pkgConfig: "libdmtx",
                       providers: [.apt(["libdmtx-dev"])]),
        .systemLibrary(name: "CTesseract", path: "Sources/CTesseract", pkgConfig: "tesseract",
                       providers: [.apt(["libtesseract-dev", "tesseract-ocr-eng"])]),

        // The concurrency primitives every module shares: a lock at a stable
        // address, a locked value box, a condition lock, a countdown latch and
        // a mailbox, all on pthreads (which ThreadSanitizer understands).
        .target(name: "TallyConcurrency", swiftSettings: strict),
        // Pure protocol code: incremental parsers and serializers, no I/O.
        .target(name: "TallyHTTP", swiftSettings: strict),
        // The sync protocol's values: requests and errors, JSON, record paths.
        .target(name: "TallyProtocol", swiftSettings: strict),
        // The pure sync engine: writes, changes, subscriptions. No I/O.
        .target(name: "TallyEngine", dependencies: ["TallyProtocol"], swiftSettings: strict),
        .target(name: "TallyWebSocket", dependencies: ["COpenSSL", "CZlib"], swiftSettings: strict),
        // TLS sessions over OpenSSL; no event loop knowledge.
        .target(name: "TallyTLS", dependencies: ["COpenSSL"], swiftSettings: strict),
        // Event loops (time from an injectable LoopClock), sockets, connections and
        // their timeout state machine, WebSocket server and client.
        .target(name: "TallyNet",
                dependencies: ["CLinuxShim", "TallyConcurrency", "TallyHTTP", "TallyWebSocket", "TallyTLS"],
                swiftSettings: strict),
        // Durable storage behind `Store`: SQLite (WAL, group commit) and an
        // in-memory twin, both also committing in place (`InPlaceCommitting`);
        // PostgreSQL (the same group commit over TallyPostgres).
        .target(name: "TallyStore", dependencies: ["CSQLite", "TallyConcurrency", "TallyProtocol", "TallySQLite",
                                                   "TallyPostgres"],
                swiftSettings: strict),
        // The one SQLite wrapper: a connection and its checked statements
        // (the hub's store uses them directly), and SQLiteDatabase over them for
        // the CLI's own files (the mirror's store, the intake outbox): WAL +
        // synchronous=FULL, transactions, typed errors; their private directories.
        .target(name: "TallySQLite", dependencies: ["CSQLite"], swiftSettings: strict),
        // One PostgreSQL connection with one owner thread (for the PostgreSQL store
        // to come): binary parameters and rows, prepared statements, transactions
        // as closure scopes, LISTEN/NOTIFY with a wakeable wait, reconnect.
        .target(name: "TallyPostgres", dependencies: ["CLibPQ", "CLinuxShim"], swiftSettings: strict),
        // One process per data directory or mirror store: an exclusive lock file naming its holder.
        .target(name: "TallyFileLock", swiftSettings: strict),
        // The hub: the core, sessions, configuration, routes, metrics.
        .target(name: "TallyServer", dependencies: ["TallyConcurrency", "TallyNet", "TallyEngine", "TallyProtocol", "TallyStore",
                                                    "TallyFileLock", "TallyImaging", "COpenSSL", "CZlib"],
                swiftSettings: strict),
        // Load generators behind `tally bench`, and the tables they report.
        .target(name: "TallyBench", dependencies: ["TallyConcurrency", "TallyClient", "TallyNet", "TallyHTTP", "TallyTLS",
                                                   "TallyImaging", "CVips", "COpenSSL", "TallyProtocol"],
                swiftSettings: strict),
        // The Swift client library: requests, reconnect with resume, observation;
        // the blocking facade and REST/blob calls the one-shot commands use;
        // the one outbox replay loop (OutboxReplay) the mirror and intake share.
        .target(name: "TallyClient", dependencies: ["TallyConcurrency", "TallyNet", "TallyHTTP", "TallyProtocol",
                                                    "TallyWebSocket", "TallyTLS"],
                swiftSettings: strict),
        // The offline mirror behind `tally mirror`: local SQLite store, outbox, merge.
        .target(name: "TallyMirror", dependencies: ["TallyClient", "TallyProtocol", "TallySQLite", "TallyFileLock"],
                swiftSettings: strict),
        // Intake jobs behind `tally intake`: the outbox of jobs and photos,
        // the typed request of each stage and the runner that resumes them.
        .target(name: "TallyIntake", dependencies: ["TallyClient", "TallyHTTP", "TallyProtocol", "TallySQLite", "COpenSSL"],
                swiftSettings: strict),
        // Photos: decoding and thumbnails (libvips), codes (ZBar, libdmtx)
        // and label text (Tesseract) in grey pixels. Blocking calls, no I/O
        // of its own: the hub runs them on its analysis threads.
        .target(name: "TallyImaging", dependencies: ["CVips", "CZBar", "CDmtx", "CTesseract"], swiftSettings: strict),
        // The command line's parser: options declared once (OptionTable) for
        // parsing and help, values checked (sizes, durations), usage errors.
        .target(name: "TallyCommandLine", swiftSettings: strict),
        // The command-line front end: argument parsing and output only.
        .executableTarget(name: "tally", dependencies: ["TallyServer", "TallyNet", "TallyBench", "TallyTLS",
                                                      "TallyProtocol", "TallyStore", "TallyEngine", "TallySQLite",
                                                      "TallyClient", "TallyMirror", "TallyIntake", "TallyConcurrency",
                                                      "TallyCommandLine", "TallyPostgres"],
                          swiftSettings: strict),

        // Helpers shared by the test targets (temporary directories, …).
        .target(name: "TallyTestSupport", swiftSettings: strict),
        // A restartable hub in the test process, for the client and mirror tests.
        .target(name: "TallyHubTestSupport", dependencies: ["TallyServer", "TallyNet", "TallyTestSupport"], swiftSettings: strict),
        .testTarget(name: "TallyConcurrencyTests", dependencies: ["TallyConcurrency", "TallyTestSupport"]),
        .testTarget(name: "TallyHTTPTests", dependencies: ["TallyHTTP"]),
        .testTarget(name: "TallyProtocolTests", dependencies: ["TallyProtocol"]),
        .testTarget(name: "TallyEngineTests", dependencies: ["TallyEngine", "TallyProtocol", "TallyTestSupport"]),
        .testTarget(name: "TallyServerTests",
                    dependencies: ["TallyConcurrency", "TallyServer", "TallyStore", "TallyNet", "TallyProtocol", "TallyTestSupport",
                                   "TallyHubTestSupport", "TallyFileLock", "TallySQLite", "TallyPostgres",
                                   "TallyImaging"]),
        .testTarget(name: "TallyWebSocketTests", dependencies: ["TallyWebSocket"]),
        .testTarget(name: "TallyTLSTests", dependencies: ["TallyTLS", "TallyTestSupport"]),
        .testTarget(name: "TallyStoreTests", dependencies: ["TallyConcurrency", "TallyStore", "TallySQLite", "TallyPostgres",
                                                            "TallyTestSupport"]),
        .testTarget(name: "TallyCommandLineTests", dependencies: ["TallyCommandLine"]),
        .testTarget(name: "TallyImagingTests", dependencies: ["TallyImaging", "TallyTestSupport"]),
        .testTarget(name: "TallySQLiteTests", dependencies: ["TallySQLite", "TallyTestSupport"]),
        .testTarget(name: "TallyPostgresTests", dependencies: ["TallyConcurrency", "TallyPostgres", "TallyTestSupport"]),
        .testTarget(name: "TallyNetTests",
                    dependencies: ["TallyConcurrency", "TallyNet", "TallyServer", "TallyTestSupport", "TallyBench"]),
        .testTarget(name: "TallyClientTests",
                    dependencies: ["TallyConcurrency", "TallyClient", "TallyServer", "TallyNet", "TallyProtocol",
                                   "TallyHTTP", "TallyWebSocket", "TallyTestSupport", "TallyHubTestSupport"]),
        .testTarget(name: "TallyIntakeTests",
                    dependencies: ["TallyIntake", "TallyClient", "TallyServer", "TallyProtocol", "TallyTestSupport",
                                   "TallyHubTestSupport"]),
        .testTarget(name: "TallyMirrorTests",
                    dependencies: ["TallyConcurrency", "TallyMirror", "TallyClient", "TallyServer", "TallyProtocol",
                                   "TallyTestSupport", "TallyHubTestSupport"]),
    ]
)
