import Dispatch
import FoundationEssentials
@preconcurrency import Glibc
import Testing
import TallyConcurrency
import TallyImaging
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

// Thumbnails (`GET /v1/blobs/{sha256}?w=N`, contract "Blobs"): the route on
// every backend over a real socket, the kept copies, and the original left
// byte for byte as uploaded.

/// Photos made in the test: grey noise with a gradient, as a camera's JPEG.
enum ThumbnailSamples {
    static func jpeg(width: Int, height: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed)
        var pixels = [UInt8](repeating: 0, count: width * height)
        for y in 0..<height {
            for x in 0..<width {
                pixels[y * width + x] = UInt8(truncatingIfNeeded: (x + y) / 8 + Int(random.next() & 0x1F))
            }
        }
        return try! PhotoDecoder.encode(GreyImage(width: width, height: height, pixels: pixels), format: .jpeg)
    }

    /// 1600 × 1200: wider than every width offered.
    static let photo = jpeg(width: 1600, height: 1200, seed: 1)
    /// A JPEG signature (so the upload is accepted) and nothing a decoder reads.
    static let corrupt: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 0x42, count: 600)
}

extension BlobTests {
    @Suite struct Thumbnails {
        /// The route over a real socket, on the memory and the disk store.
        static func servers(_ body: (BlobTestServer, BlobStore, BlobDataDirectory?) throws -> Void) throws {
            let memory = try BlobStore(directory: nil)
            let memoryServer = try BlobTestServer(blobs: memory, data: BlobDataDirectory())
            defer { memoryServer.close() }
            try body(memoryServer, memory, nil)
            let data = try BlobDataDirectory()
            let disk = try BlobStore(directory: data.path)
            let diskServer = try BlobTestServer(blobs: disk, data: data)
            defer { diskServer.close() }
            try body(diskServer, disk, data)
        }

        static func upload(_ server: BlobTestServer, _ bytes: [UInt8], type: String = "image/jpeg") throws -> String {
            let sha = BlobSamples.sha(bytes)
            let result = try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": type], bytes)
            #expect(result.status == 201)
            return sha
        }

        @Test func everyWidthIsAJPEGThatFitsItsBox() throws {
            try Self.servers { server, store, _ in
                let sha = try Self.upload(server, ThumbnailSamples.photo)
                for width in BlobStore.thumbnailWidths {
                    let got = try server.send("GET", "/v1/blobs/\(sha)?w=\(width)")
                    #expect(got.status == 200)
                    #expect(got.header("Content-Type") == "image/jpeg")
                    #expect(got.header("ETag") == "\"\(sha)-\(width).jpeg\"")
                    #expect(got.header("Cache-Control") == "public, max-age=31536000, immutable")
                    #expect(got.header("Vary") == "Accept")
                    let size = try PhotoDecoder.size(of: got.body)
                    #expect(size.width == width && size.height == width * 3 / 4, "\(size) for w=\(width)")
                    #expect(got.body.count < ThumbnailSamples.photo.count)
                }
                #expect(store.thumbnailsMade.load(ordering: .relaxed) == BlobStore.thumbnailWidths.count)
                #expect(store.usedBytes == ThumbnailSamples.photo.count, "thumbnails are not counted in blobQuota")
            }
        }

        @Test func theOriginalStaysByteForByte() throws {
            try Self.servers { server, _, data in
                let photo = ThumbnailSamples.photo
                let sha = try Self.upload(server, photo)
                for width in [64, 1024] {
                    #expect(try server.send("GET", "/v1/blobs/\(sha)?w=\(width)", ["Accept": "image/webp"]).status == 200)
                    #expect(try server.send("GET", "/v1/blobs/\(sha)?w=\(width)").status == 200)
                }
                let original = try server.send("GET", "/v1/blobs/\(sha)")
                #expect(original.status == 200 && original.body == photo)
                #expect(original.header("ETag") == "\"\(sha)\"" && original.header("Vary") == nil)
                guard let data else { return }
                let onDisk = try #require(FileManager.default.contents(atPath: data.path + "/blobs/\(sha.prefix(2))/\(sha)"))
                #expect(Array(onDisk) == photo)
                let kept = try FileManager.default.contentsOfDirectory(atPath: data.path + "/blobs/thumbs/\(sha.prefix(2))")
                #expect(kept.sorted() == ["\(sha)-1024.jpeg", "\(sha)-1024.webp", "\(sha)-64.jpeg", "\(sha)-64.webp"],
                        "no temporary file is left behind")
                #expect(data.blobFiles().contains("\(sha.prefix(2))/\(sha)"))
                // Reopened: the quota counts the photo alone.
                #expect(try BlobStore(directory: data.path).usedBytes == photo.count)
            }
        }

        @Test func aBadWidthIs400NamingTheWidths() throws {
            try Self.servers { server, store, _ in
                let sha = try Self.upload(server, ThumbnailSamples.photo)
                for query in ["w=100", "w=abc", "w=", "w=-64", "w=%FF", "w=64.0", "w=0128"] {
                    let got = try server.send("GET", "/v1/blobs/\(sha)?\(query)")
                    #expect(got.status == 400, "\(query)")
                    let error = try #require(try got.json["error"]?.objectValue)
                    #expect(error["code"] == "bad_field" && error["field"] == "w", "\(query)")
                    let message = try #require(error["message"]?.stringValue)
                    #expect(message.contains("64, 128, 256, 512, 1024"), "\(message)")
                    #expect(error["allowed"] == .array([64, 128, 256, 512, 1024].map { .number(JSONNumber($0)) }))
                }
                #expect(store.thumbnailsMade.load(ordering: .relaxed) == 0)
                // Other parameters leave the original as it is.
                #expect(try server.send("GET", "/v1/blobs/\(sha)?v=2").body == ThumbnailSamples.photo)
            }
        }

        @Test func ifNoneMatchAnswers304() throws {
            try Self.servers { server, _, _ in
                let sha = try Self.upload(server, ThumbnailSamples.photo)
                let first = try server.send("GET", "/v1/blobs/\(sha)?w=256")
                let etag = try #require(first.header("ETag"))
                for tag in [etag, "W/\(etag)", "\"x\", \(etag)"] {
                    let cached = try server.send("GET", "/v1/blobs/\(sha)?w=256", ["If-None-Match": tag])
                    #expect(cached.status == 304 && cached.body.isEmpty && cached.header("ETag") == etag)
                    #expect(cached.header("Vary") == "Accept")
                }
                // The original's ETag, another width's, another format's: a full answer.
                for tag in ["\"\(sha)\"", "\"\(sha)-512.jpeg\"", "\"\(sha)-256.webp\""] {
                    let other = try server.send("GET", "/v1/blobs/\(sha)?w=256", ["If-None-Match": tag])
                    #expect(other.status == 200 && other.body == first.body)
                }
            }
        }

        @Test func webPWhenAcceptListsIt() throws {
            try Self.servers { server, _, _ in
                let sha = try Self.upload(server, ThumbnailSamples.photo)
                let chrome = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
                for accept in [chrome, "image/webp", "IMAGE/WEBP; q=0.5"] {
                    let got = try server.send("GET", "/v1/blobs/\(sha)?w=128", ["Accept": accept])
                    #expect(got.status == 200 && got.header("Content-Type") == "image/webp", "\(accept)")
                    #expect(BlobSignature.sniff(got.body) == "image/webp")
                    #expect(got.header("ETag") == "\"\(sha)-128.webp\"" && got.header("Vary") == "Accept")
                    #expect(try PhotoDecoder.size(of: got.body).width == 128)
                }
                for accept in ["image/jpeg", "*/*", "image/webp;q=0", "image/webpx"] {
                    let got = try server.send("GET", "/v1/blobs/\(sha)?w=128", ["Accept": accept])
                    #expect(got.header("Content-Type") == "image/jpeg", "\(accept)")
                    #expect(BlobSignature.sniff(got.body) == "image/jpeg")
                }
            }
        }

        /// The second request is served from the kept copy: on disk, a kept
        /// file changed behind the hub's back is what the next request gets.
        @Test func madeOnceThenServedFromTheKeptCopy() throws {
            try Self.servers { server, store, data in
                let sha = try Self.upload(server, ThumbnailSamples.photo)
                let first = try server.send("GET", "/v1/blobs/\(sha)?w=512")
                let second = try server.send("GET", "/v1/blobs/\(sha)?w=512")
                #expect(first.body == second.body)
                #expect(store.thumbnailsMade.load(ordering: .relaxed) == 1)
                #expect(store.thumbnailsReused.load(ordering: .relaxed) == 1)
                #expect(store.prometheusText.contains("tally_thumbnails_made_total 1\n"))
                #expect(store.prometheusText.contains("tally_thumbnails_reused_total 1\n"))
                guard let data else { return }
                let kept = data.path + "/blobs/thumbs/\(sha.prefix(2))/\(sha)-512.jpeg"
                #expect(FileManager.default.contents(atPath: kept).map(Array.init) == first.body)
                let marked = ThumbnailSamples.jpeg(width: 16, height: 12, seed: 5)
                #expect(FileManager.default.createFile(atPath: kept, contents: Data(marked)))
                #expect(try server.send("GET", "/v1/blobs/\(sha)?w=512").body == marked)
                #expect(store.thumbnailsMade.load(ordering: .relaxed) == 1)
            }
        }

        @Test func concurrentFirstRequestsLeaveOneWholeCopy() throws {
            let data = try BlobDataDirectory()
            let store = try BlobStore(directory: data.path)
            let photo = ThumbnailSamples.photo, sha = BlobSamples.sha(photo)
            _ = try store.put(sha256: sha, contentType: "image/jpeg", bytes: photo)
            let key = BlobStore.ThumbnailKey(sha256: sha, width: 256, format: .jpeg)
            let answers = LockedValueBox<[[UInt8]]>([])
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                if let made = try? store.thumbnail(key) { answers.withLock { $0.append(made.bytes) } }
            }
            let bytes = answers.withLock { $0 }
            #expect(bytes.count == 4)
            let kept = try #require(FileManager.default.contents(atPath: data.path + "/blobs/thumbs/\(sha.prefix(2))/\(key.fileName)"))
            #expect(bytes.allSatisfy { $0 == Array(kept) }, "every answer is the whole kept file")
            #expect(try FileManager.default.contentsOfDirectory(atPath: data.path + "/blobs/thumbs/\(sha.prefix(2))")
                    == [key.fileName])
            #expect(store.thumbnailsMade.load(ordering: .relaxed) + store.thumbnailsReused.load(ordering: .relaxed) == 4)
        }

        /// A photo no decoder reads is a 422 with the decoder's reason; the
        /// original is still served and other thumbnails still made.
        @Test func anUndecodablePhotoIs422AndTheHubGoesOn() throws {
            try Self.servers { server, store, _ in
                let corrupt = try Self.upload(server, ThumbnailSamples.corrupt)
                for _ in 0..<2 {
                    let got = try server.send("GET", "/v1/blobs/\(corrupt)?w=128")
                    #expect(got.status == 422)
                    let error = try #require(try got.json["error"]?.objectValue)
                    #expect(error["code"] == "undecodable_photo")
                    let reason = try #require(error["reason"]?.stringValue)
                    #expect(reason.contains("cannot be decoded"), "\(reason)")
                    #expect(error["message"]?.stringValue?.contains("without w") == true)
                }
                #expect(try server.send("GET", "/v1/blobs/\(corrupt)").body == ThumbnailSamples.corrupt)
                let truncated = Array(ThumbnailSamples.photo.prefix(ThumbnailSamples.photo.count / 3))
                let cut = try Self.upload(server, truncated)
                // libvips shows what there is of a cut-off JPEG: half a
                // photo is a better thumbnail than none.
                #expect([200, 422].contains(try server.send("GET", "/v1/blobs/\(cut)?w=64").status))
                let good = try Self.upload(server, ThumbnailSamples.jpeg(width: 300, height: 200, seed: 2))
                #expect(try server.send("GET", "/v1/blobs/\(good)?w=64").status == 200)
                #expect(store.exists(sha256: good))
            }
        }

        @Test func unknownPhotosAre404AndReadsAreAuthorized() throws {
            try Self.servers { server, _, _ in
                let missing = BlobSamples.sha(Array("nothing".utf8))
                let got = try server.send("GET", "/v1/blobs/\(missing)?w=64")
                let code = try got.json["error"]?.objectValue?["code"]
                #expect(got.status == 404 && code == "not_found")
                #expect(try server.send("GET", "/v1/blobs/\(missing)?w=64", ["If-None-Match": "*"]).status == 404)
                #expect(try server.send("GET", "/v1/blobs/nope?w=64").status == 400)
            }
            let server = try BlobTestServer(token: "secret")
            defer { server.close() }
            let auth = ["Authorization": "Bearer secret"]
            let photo = ThumbnailSamples.jpeg(width: 200, height: 100, seed: 3), sha = BlobSamples.sha(photo)
            #expect(try server.send("PUT", "/v1/blobs/\(sha)", auth.merging(["Content-Type": "image/jpeg"]) { a, _ in a }, photo).status == 201)
            #expect(try server.send("GET", "/v1/blobs/\(sha)?w=64").status == 401)
            #expect(try server.send("GET", "/v1/blobs/\(sha)?w=100").status == 401, "no hints before authorization")
            #expect(try server.send("GET", "/v1/blobs/\(sha)?w=64", auth).status == 200)
            #expect(server.authorized.withLock { $0 }.filter { $0.hasPrefix("read") } == ["read blobs/\(sha)"])
        }

        /// A backup copies the photos, not their thumbnails (made again on demand).
        @Test func aBackupLeavesThumbnailsOut() throws {
            let data = try BlobDataDirectory(), target = try BlobDataDirectory()
            let store = try BlobStore(directory: data.path)
            let photo = ThumbnailSamples.photo, sha = BlobSamples.sha(photo)
            _ = try store.put(sha256: sha, contentType: "image/jpeg", bytes: photo)
            _ = try store.thumbnail(.init(sha256: sha, width: 64, format: .jpeg))
            let targetFiles = BlobFiles(root: target.path + "/blobs")
            try targetFiles.prepare(dataDirectory: target.path)
            let copied = try BlobFiles(root: data.path + "/blobs").copyMissing(into: targetFiles)
            #expect(copied.blobs == 1 && copied.bytes == photo.count)
            #expect(target.blobFiles() == ["\(sha.prefix(2))/\(sha)"])
        }

        /// On PostgreSQL the thumbnail is a row every hub on the database
        /// serves: made by the first hub asked, read by the others.
        @Test func onPostgresOneHubMakesItAndAnotherServesIt() throws {
            let url = try Postgres.database("blob_thumbs")
            let a = try BlobStore(postgres: url), b = try BlobStore(postgres: url)
            defer { a.close(); b.close() }
            let server = try BlobTestServer(blobs: a, data: BlobDataDirectory())
            defer { server.close() }
            let sha = try Self.upload(server, ThumbnailSamples.photo)
            let made = try server.send("GET", "/v1/blobs/\(sha)?w=256", ["Accept": "image/webp"])
            #expect(made.status == 200 && made.header("Content-Type") == "image/webp")
            let served = try #require(try b.thumbnail(.init(sha256: sha, width: 256, format: .webp)))
            #expect(served.bytes == made.body && !served.made)
            #expect(a.thumbnailsMade.load(ordering: .relaxed) == 1 && b.thumbnailsMade.load(ordering: .relaxed) == 0)
            #expect(try server.send("GET", "/v1/blobs/\(sha)").body == ThumbnailSamples.photo)
            #expect(a.usedBytes == ThumbnailSamples.photo.count)
            let corrupt = try Self.upload(server, ThumbnailSamples.corrupt)
            #expect(try server.send("GET", "/v1/blobs/\(corrupt)?w=64").status == 422)
        }
    }
}
