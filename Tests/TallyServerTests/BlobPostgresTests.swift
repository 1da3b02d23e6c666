import Dispatch
import FoundationEssentials
@preconcurrency import Glibc
import Testing
import TallyConcurrency
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

// Photos of hubs on PostgreSQL (`BlobStore(postgres:)`): what only that
// backend has — a database shared by several hubs, a server that goes
// away, the photos an older hub left in its data directory. The contract
// every backend keeps runs in BlobStoreTests and BlobQuotaTests.

extension BlobTests {
    @Suite struct Postgres {
        static func database(_ prefix: String) throws -> String {
            try PostgresCluster.shared().createDatabase(prefix)
        }

        /// The total is one SUM at open: a store opened again counts what
        /// the database holds and refuses what would pass the quota.
        @Test func theTotalIsCountedAtOpen() throws {
            let url = try Self.database("blob_total")
            let blob = Quota.jpeg(100, seed: 9)
            do {
                let store = try BlobStore(postgres: url, quota: 150)
                defer { store.close() }
                _ = try store.put(sha256: blob.sha, contentType: "image/jpeg", bytes: blob.bytes)
            }
            let reopened = try BlobStore(postgres: url, quota: 150)
            defer { reopened.close() }
            #expect(reopened.usedBytes == 100)
            let next = Quota.jpeg(100, seed: 10)
            #expect(throws: BlobError.quotaExceeded(size: 100, used: 100, quota: 150)) {
                try reopened.put(sha256: next.sha, contentType: "image/jpeg", bytes: next.bytes)
            }
        }

        /// Uploads that race on several pool connections cannot pass the
        /// quota together.
        @Test func concurrentUploadsStayWithinTheQuota() throws {
            let store = try BlobStore(postgres: Self.database("blob_race"), quota: 1_000, connections: 3)
            defer { store.close() }
            let blobs = (0..<32).map { Quota.jpeg(100, seed: UInt8($0)) }
            let stored = LockedValueBox(0)
            DispatchQueue.concurrentPerform(iterations: blobs.count) { index in
                if (try? store.put(sha256: blobs[index].sha, contentType: "image/jpeg", bytes: blobs[index].bytes)) != nil {
                    stored.withLock { $0 += 1 }
                }
            }
            #expect(stored.withLock { $0 } == 10)
            #expect(store.usedBytes == 1_000)
            #expect(blobs.filter { store.exists(sha256: $0.sha) }.count == 10)
        }

        /// Two hubs' stores on one database: what one stores the other
        /// serves, byte for byte; each counts the quota from what it read at
        /// open plus its own uploads.
        @Test func aPhotoStoredThroughOneHubIsServedByAnother() throws {
            let url = try Self.database("blob_shared")
            let a = try BlobStore(postgres: url, quota: 100_000), b = try BlobStore(postgres: url, quota: 100_000)
            defer { a.close(); b.close() }
            let bytes = DemoImage.png(width: 200, height: 150, seed: 4, label: "shared")
            let sha = BlobSamples.sha(bytes)
            #expect(try a.put(sha256: sha, contentType: "image/png", bytes: bytes).created)
            #expect(b.exists(sha256: sha))
            let served = try #require(try b.get(sha256: sha))
            #expect(served.bytes == bytes && served.type == "image/png")
            #expect(try !b.put(sha256: sha, contentType: "image/png", bytes: bytes).created, "idempotent across hubs")
            #expect(a.usedBytes == bytes.count && b.usedBytes == 0)
            let c = try BlobStore(postgres: url, quota: 100_000)
            defer { c.close() }
            #expect(c.usedBytes == bytes.count)
        }

        /// A database that stays unreachable answers 503 `storage_failed`
        /// with Retry-After and a message that says so (and no server
        /// detail); once it is back, uploads and downloads work again on new
        /// sessions, with no restart.
        @Test func anUnreachableDatabaseAnswers503UntilItIsBack() throws {
            let cluster = try PostgresCluster.start(fsync: false)
            defer { cluster.destroy() }
            let blobs = try BlobStore(postgres: cluster.createDatabase("gone"))
            defer { blobs.close() }
            let logged = LockedValueBox<[String]>([])
            let server = try BlobTestServer(blobs: blobs, data: BlobDataDirectory(),
                                            logger: Logger(level: .info) { line in logged.withLock { $0.append(line) } })
            defer { server.close() }
            let png = BlobSamples.png, sha = BlobSamples.sha(png)
            #expect(try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/png"], png).status == 201)

            try cluster.stop()
            let gif = BlobSamples.gif, gifSHA = BlobSamples.sha(gif)
            for result in [try server.send("PUT", "/v1/blobs/\(gifSHA)", ["Content-Type": "image/gif"], gif),
                           try server.send("GET", "/v1/blobs/\(sha)")] {
                #expect(result.status == 503)
                #expect(result.header("Retry-After") != nil)
                let error = try #require(try result.json["error"]?.objectValue)
                #expect(error["code"] == "storage_failed")
                let message = try #require(error["message"]?.stringValue)
                #expect(message.contains("cannot reach its database"), "\(message)")
                #expect(!message.contains("127.0.0.1"), "no server detail for clients: \(message)")
            }

            // The operator learns why, once per 10 s, with the server named.
            let lines = logged.withLock { $0 }.filter { $0.contains("event=blob.storage_failed") }
            #expect(lines.count == 1, "\(lines)")
            #expect(lines.first?.contains("127.0.0.1:\(cluster.port)") == true, "\(lines)")

            try cluster.start()
            #expect(try server.send("PUT", "/v1/blobs/\(gifSHA)", ["Content-Type": "image/gif"], gif).status == 201)
            #expect(try server.send("GET", "/v1/blobs/\(sha)").body == png)
        }

        /// Photos a hub on PostgreSQL kept in `<data>/blobs` before they
        /// moved into the database are imported once, counted in the quota,
        /// and the directory is set aside; a damaged file is not imported.
        @Test func photosLeftInTheDataDirectoryAreImported() throws {
            let directory = try BlobDataDirectory()
            let old = try BlobStore(directory: directory.path)
            let kept = [BlobSamples.png, BlobSamples.jpeg]
            for bytes in kept { _ = try old.put(sha256: BlobSamples.sha(bytes), contentType: BlobSignature.sniff(bytes), bytes: bytes) }
            // A file whose bytes no longer hash to its name.
            let rotten = BlobSamples.sha(BlobSamples.gif)
            try FileManager.default.createDirectory(atPath: directory.path + "/blobs/" + rotten.prefix(2),
                                                    withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: directory.path + "/blobs/\(rotten.prefix(2))/\(rotten)",
                                                   contents: Data(BlobSamples.gif + [0])))

            let store = try BlobStore(postgres: Self.database("blob_import"))
            defer { store.close() }
            let imported = try #require(try store.importFiles(fromDataDirectory: directory.path))
            #expect(imported == .init(photos: 2, bytes: kept.map(\.count).reduce(0, +), damaged: 1,
                                      movedTo: directory.path + "/blobs.imported"))
            for bytes in kept { #expect(try store.get(sha256: BlobSamples.sha(bytes))?.bytes == bytes) }
            #expect(!store.exists(sha256: rotten))
            #expect(store.usedBytes == imported.bytes)
            #expect(!FileManager.default.fileExists(atPath: directory.path + "/blobs"))
            #expect(FileManager.default.fileExists(atPath: directory.path + "/blobs.imported/\(rotten.prefix(2))/\(rotten)"),
                    "the damaged file stays for the operator")
            #expect(try store.importFiles(fromDataDirectory: directory.path) == nil, "nothing left to import")
        }
    }
}
