import Dispatch
@preconcurrency import Glibc
import Testing
import TallyConcurrency
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

// The blob quota: photos together take at most `blobQuota` bytes, so they
// cannot fill the disk the records need. An upload past it is refused with
// `quota_exceeded` (HTTP 507) and writes nothing.

extension BlobTests {
    @Suite struct Quota {
        /// Blobs of `size` bytes (a JPEG signature, then `seed`).
        static func jpeg(_ size: Int, seed: UInt8) -> (sha: String, bytes: [UInt8]) {
            let bytes = [0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: seed, count: size - 4)
            return (BlobSamples.sha(bytes), bytes)
        }

        @Test func anUploadPastTheQuotaIsRefusedAndWritesNothing() throws {
            try BlobTests.Store.backendsWithQuota(250) { (store: BlobStore, directory: BlobDataDirectory?) throws in
                let first = Self.jpeg(100, seed: 1), second = Self.jpeg(100, seed: 2), third = Self.jpeg(100, seed: 3)
                #expect(try store.put(sha256: first.sha, contentType: "image/jpeg", bytes: first.bytes).created)
                #expect(try store.put(sha256: second.sha, contentType: "image/jpeg", bytes: second.bytes).created)
                #expect(store.usedBytes == 200)
                #expect(throws: BlobError.quotaExceeded(size: 100, used: 200, quota: 250)) {
                    try store.put(sha256: third.sha, contentType: "image/jpeg", bytes: third.bytes)
                }
                #expect(!store.exists(sha256: third.sha))
                #expect(store.usedBytes == 200, "a refused upload counts nothing")
                if let directory {
                    #expect(directory.blobFiles().count == 2, "and leaves no file behind")
                }
                // One that is there already takes no room: still accepted.
                #expect(try !store.put(sha256: first.sha, contentType: "image/jpeg", bytes: first.bytes).created)
                let small = Self.jpeg(50, seed: 4)
                #expect(try store.put(sha256: small.sha, contentType: "image/jpeg", bytes: small.bytes).created,
                        "exactly up to the quota is allowed")
                #expect(store.usedBytes == 250)
            }
        }

        /// The total is counted when the store opens (temporary files left
        /// by a crash not included), then moved by each upload.
        @Test func theTotalIsCountedAtOpen() throws {
            let directory = try BlobDataDirectory()
            let blob = Self.jpeg(100, seed: 9)
            do {
                let store = try BlobStore(directory: directory.path, quota: 150)
                _ = try store.put(sha256: blob.sha, contentType: "image/jpeg", bytes: blob.bytes)
            }
            let leftover = directory.path + "/blobs/\(blob.sha.prefix(2))/.tmp-1-1"
            let fd = open(leftover, O_WRONLY | O_CREAT, 0o600)
            _ = write(fd, [UInt8](repeating: 0, count: 1000), 1000)
            close(fd)
            let reopened = try BlobStore(directory: directory.path, quota: 150)
            #expect(reopened.usedBytes == 100)
            let next = Self.jpeg(100, seed: 10)
            #expect(throws: BlobError.quotaExceeded(size: 100, used: 100, quota: 150)) {
                try reopened.put(sha256: next.sha, contentType: "image/jpeg", bytes: next.bytes)
            }
            #expect(BlobStore.defaultQuota == 10 << 30)
        }

        /// Uploads that race cannot pass the quota together: each reserves
        /// its size before it writes.
        @Test func concurrentUploadsStayWithinTheQuota() throws {
            let directory = try BlobDataDirectory()
            let store = try BlobStore(directory: directory.path, quota: 1_000)
            let blobs = (0..<32).map { Self.jpeg(100, seed: UInt8($0)) }
            let stored = LockedValueBox(0)
            DispatchQueue.concurrentPerform(iterations: blobs.count) { index in
                let blob = blobs[index]
                if (try? store.put(sha256: blob.sha, contentType: "image/jpeg", bytes: blob.bytes)) != nil {
                    stored.withLock { $0 += 1 }
                }
            }
            #expect(stored.withLock { $0 } == 10)
            #expect(store.usedBytes == 1_000)
            #expect(directory.blobFiles().count == 10)
        }

        @Test func theRouteAnswers507QuotaExceeded() throws {
            let server = try BlobTestServer(quota: 150)
            defer { server.close() }
            let first = Self.jpeg(100, seed: 1), second = Self.jpeg(100, seed: 2)
            #expect(try server.send("PUT", "/v1/blobs/\(first.sha)", ["Content-Type": "image/jpeg"], first.bytes).status == 201)
            let refused = try server.send("PUT", "/v1/blobs/\(second.sha)", ["Content-Type": "image/jpeg"], second.bytes)
            #expect(refused.status == 507)
            guard case .object(let error)? = try refused.json["error"] else { Issue.record("no error object"); return }
            #expect(error["code"] == "quota_exceeded")
            #expect(error["quota"] == .number(JSONNumber(150)))
            #expect(error["message"]?.stringValue?.contains("blobQuota") == true, "says what to raise")
            #expect(try server.send("GET", "/v1/blobs/\(second.sha)").status == 404)
        }
    }
}

extension BlobTests.Store {
    /// `backends`, with a quota.
    static func backendsWithQuota(_ quota: Int, _ body: (BlobStore, BlobDataDirectory?) throws -> Void) throws {
        try body(try BlobStore(directory: nil, quota: quota), nil)
        let directory = try BlobDataDirectory()
        try body(try BlobStore(directory: directory.path, quota: quota), directory)
        let database = try BlobStore(postgres: PostgresCluster.shared().createDatabase("blobstore"), quota: quota)
        defer { database.close() }
        try body(database, nil)
    }
}
