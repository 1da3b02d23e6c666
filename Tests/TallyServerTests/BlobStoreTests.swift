import CZlib
import Dispatch
import FoundationEssentials
@preconcurrency import Glibc
import Testing
import TallyConcurrency
import TallyHTTP
import TallyNet
import TallyProtocol
@testable import TallyServer
import TallyHubTestSupport
import TallyTestSupport

// Blob storage (contract, "Blobs"): the store on both backends, the HTTP
// routes over a real socket, and the demo PNG generator. One outer suite so
// `swift test --filter Blob` runs all of it.

/// Small valid blobs of every accepted type: a signature and some payload.
enum BlobSamples {
    static let png = DemoImage.png(width: 8, height: 6, seed: 7, label: nil)
    static let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array("JFIF jpeg payload".utf8)
    static let gif: [UInt8] = Array("GIF89a".utf8) + [1, 0, 1, 0, 0, 0, 0, 0x3B]
    static let webp: [UInt8] = Array("RIFF".utf8) + [20, 0, 0, 0] + Array("WEBPVP8 payload".utf8)
    static let heic: [UInt8] = [0, 0, 0, 24] + Array("ftypheic".utf8) + [0, 0, 0, 0] + Array("mif1heic".utf8)
    static let all: [(String, [UInt8])] = [("image/png", png), ("image/jpeg", jpeg), ("image/gif", gif),
                                           ("image/webp", webp), ("image/heic", heic)]

    static func sha(_ bytes: [UInt8]) -> String { try! BlobStore.sha256Hex(bytes) }
}

/// A temporary data directory removed with everything under it (blobs live
/// two levels down, deeper than `TemporaryDirectory` cleans).
final class BlobDataDirectory {
    let path: String
    private let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory(prefix: "tally-blobs")
        path = directory.path
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Every file under `blobs/`, relative to it.
    func blobFiles() -> [String] {
        let root = path + "/blobs"
        let fanOuts = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return fanOuts.flatMap { fanOut in
            ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + fanOut)) ?? []).map { fanOut + "/" + $0 }
        }.sorted()
    }
}

@Suite struct BlobTests {
    @Suite struct Store {
        /// One body against every backend: memory, disk and PostgreSQL (a
        /// fresh database of the test process's server) (STYLE.md, habit 12).
        static func backends(_ body: (BlobStore, String?) throws -> Void) throws {
            try backendsWithQuota(BlobStore.defaultQuota) { store, directory in try body(store, directory?.path) }
        }

        @Test func sha256MatchesTheFIPSVector() throws {
            #expect(try BlobStore.sha256Hex(Array("abc".utf8))
                    == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        }

        @Test func putThenGetEveryType() throws {
            try Store.backends { store, _ in
                for (type, bytes) in BlobSamples.all {
                    let sha = BlobSamples.sha(bytes)
                    #expect(!store.exists(sha256: sha))
                    #expect(try store.get(sha256: sha) == nil)
                    let result = try store.put(sha256: sha, contentType: type, bytes: bytes)
                    #expect(result.created && result.type == type)
                    #expect(store.exists(sha256: sha))
                    let blob = try #require(try store.get(sha256: sha))
                    #expect(blob.bytes == bytes && blob.type == type)
                }
            }
        }

        @Test func secondPutIsIdempotent() throws {
            try Store.backends { store, _ in
                let sha = BlobSamples.sha(BlobSamples.jpeg)
                #expect(try store.put(sha256: sha, contentType: "image/jpeg", bytes: BlobSamples.jpeg).created)
                let again = try store.put(sha256: sha, contentType: "IMAGE/JPEG; q=1", bytes: BlobSamples.jpeg)
                #expect(!again.created && again.type == "image/jpeg")
            }
        }

        @Test func refusesWhatItMustNotStore() throws {
            try Store.backends { store, _ in
                let png = BlobSamples.png, sha = BlobSamples.sha(png)
                func refusal(_ sha: String, _ type: String?, _ bytes: [UInt8]) -> BlobError? {
                    do throws(BlobError) {
                        _ = try store.put(sha256: sha, contentType: type, bytes: bytes)
                        return nil
                    } catch { return error }
                }
                #expect(refusal(sha.uppercased(), "image/png", png)?.code == "bad_field")
                #expect(refusal(String(sha.dropLast()), "image/png", png)?.code == "bad_field")
                #expect(refusal("../" + sha.dropFirst(3), "image/png", png)?.code == "bad_field")
                #expect(refusal(sha, nil, png) == .unsupportedType(nil))
                #expect(refusal(sha, "image/bmp", png) == .unsupportedType("image/bmp"))
                #expect(refusal(sha, "image/jpeg", png) == .signatureMismatch(declared: "image/jpeg", found: "image/png", empty: false))
                #expect(refusal(BlobSamples.sha([]), "image/png", []) == .signatureMismatch(declared: "image/png", found: nil, empty: true))
                let text = Array("<html>".utf8)
                #expect(refusal(BlobSamples.sha(text), "image/gif", text)?.code == "unsupported_type")
                let other = BlobSamples.sha(BlobSamples.jpeg)
                #expect(refusal(other, "image/png", png) == .checksumMismatch(expected: other, actual: sha))
                #expect(!store.exists(sha256: sha) && !store.exists(sha256: other))
            }
        }

        @Test func refusesBlobsOverTheLimit() throws {
            let store = try BlobStore(directory: nil, maxBlobSize: 100)
            let big = BlobSamples.jpeg + [UInt8](repeating: 7, count: 100)
            #expect(throws: BlobError.tooLarge(size: big.count, limit: 100)) {
                try store.put(sha256: BlobSamples.sha(big), contentType: "image/jpeg", bytes: big)
            }
            #expect(BlobStore.defaultMaxBlobSize == 16 << 20)
        }

        @Test func everyErrorSaysWhatToFix() {
            let errors: [BlobError] = [
                .badSHA256(String(repeating: "x", count: 500)), .unsupportedType(nil), .unsupportedType("text/html"),
                .signatureMismatch(declared: "image/png", found: "image/gif", empty: false),
                .signatureMismatch(declared: "image/png", found: nil, empty: false),
                .signatureMismatch(declared: "image/png", found: nil, empty: true),
                .tooLarge(size: 2, limit: 1), .quotaExceeded(size: 2, used: 9, quota: 10),
                .checksumMismatch(expected: "a", actual: "b"),
                .storageFailed(operation: "fsync the blob", path: "/secret/path", errno: ENOSPC),
            ]
            for error in errors {
                #expect(error.message.utf8.count > 20 && error.message.utf8.count < 300)
                #expect(!error.message.contains("/secret"), "messages go to clients: no server paths")
            }
            #expect(errors.last!.description.contains("/secret/path"), "descriptions go to logs: with the path")
        }

        @Test func layoutIsTwoLevelFanOutWithNothingElse() throws {
            let directory = try BlobDataDirectory()
            let store = try BlobStore(directory: directory.path)
            let sha = BlobSamples.sha(BlobSamples.gif)
            _ = try store.put(sha256: sha, contentType: "image/gif", bytes: BlobSamples.gif)
            #expect(directory.blobFiles() == ["\(sha.prefix(2))/\(sha)"])
            var status = stat()
            #expect(stat(directory.path + "/blobs", &status) == 0 && status.st_mode & 0o777 == 0o700)
        }

        @Test func survivesReopen() throws {
            let directory = try BlobDataDirectory()
            let sha = BlobSamples.sha(BlobSamples.webp)
            do {
                let store = try BlobStore(directory: directory.path)
                _ = try store.put(sha256: sha, contentType: "image/webp", bytes: BlobSamples.webp)
            }
            let reopened = try BlobStore(directory: directory.path)
            let blob = try #require(try reopened.get(sha256: sha))
            #expect(blob.bytes == BlobSamples.webp && blob.type == "image/webp")
            #expect(try !reopened.put(sha256: sha, contentType: "image/webp", bytes: BlobSamples.webp).created)
        }

        @Test func createsAMissingDataDirectory() throws {
            let directory = try BlobDataDirectory()
            let nested = directory.path + "/a/b"
            let store = try BlobStore(directory: nested)
            let sha = BlobSamples.sha(BlobSamples.heic)
            #expect(try store.put(sha256: sha, contentType: "image/heic", bytes: BlobSamples.heic).created)
            #expect(FileManager.default.fileExists(atPath: nested + "/blobs/" + sha.prefix(2) + "/" + sha))
        }

        @Test func aDataPathThatIsAFileIsAStorageError() throws {
            // A file where the data directory should be fails for root too,
            // unlike a read-only directory.
            let directory = try BlobDataDirectory()
            let file = directory.path + "/file"
            #expect(FileManager.default.createFile(atPath: file, contents: Data([1])))
            #expect {
                try BlobStore(directory: file)
            } throws: { error in
                guard case .storageFailed(_, let path, let code)? = error as? BlobError else { return false }
                return path == file + "/blobs" && code == ENOTDIR
            }
        }

        @Test func openRemovesOnlyAbandonedTemporaryFiles() throws {
            let directory = try BlobDataDirectory()
            let sha = BlobSamples.sha(BlobSamples.jpeg)
            _ = try BlobStore(directory: directory.path).put(sha256: sha, contentType: "image/jpeg", bytes: BlobSamples.jpeg)
            let fanOut = directory.path + "/blobs/" + sha.prefix(2)
            for name in [".tmp-1-old", ".tmp-1-young"] {
                #expect(FileManager.default.createFile(atPath: fanOut + "/" + name, contents: Data([1, 2, 3])))
            }
            var times = [timespec(tv_sec: time(nil) - 2 * 3600, tv_nsec: 0), timespec(tv_sec: time(nil) - 2 * 3600, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, fanOut + "/.tmp-1-old", &times, 0) == 0)
            _ = try BlobStore(directory: directory.path)
            #expect(directory.blobFiles() == ["\(sha.prefix(2))/.tmp-1-young", "\(sha.prefix(2))/\(sha)"].sorted())
        }

        @Test func concurrentPutsOfOneBlobStoreItOnce() throws {
            try Store.backends { store, path in
                let bytes = DemoImage.png(width: 64, height: 48, seed: 99, label: "race")
                let sha = BlobSamples.sha(bytes)
                let outcomes = LockedValueBox<[Result<Bool, BlobError>]>([])
                DispatchQueue.concurrentPerform(iterations: 8) { _ in
                    let outcome: Result<Bool, BlobError>
                    do throws(BlobError) { outcome = .success(try store.put(sha256: sha, contentType: "image/png", bytes: bytes).created) }
                    catch { outcome = .failure(error) }
                    outcomes.withLock { $0.append(outcome) }
                }
                let created = try outcomes.withLock { $0 }.map { try $0.get() }
                #expect(created.count == 8)
                // link(2) publishes exactly once; only a file system without
                // hard links (rename fallback) could report more.
                #expect(created.filter { $0 }.count == 1)
                #expect(try store.get(sha256: sha)?.bytes == bytes)
                if let path {
                    let files = try FileManager.default.contentsOfDirectory(atPath: path + "/blobs/" + sha.prefix(2))
                    #expect(files == [sha], "no temporary file is left behind")
                }
            }
        }

        @Test func sniffsOnlyRealSignatures() {
            for (type, bytes) in BlobSamples.all { #expect(BlobSignature.sniff(bytes) == type) }
            #expect(BlobSignature.sniff([]) == nil)
            #expect(BlobSignature.sniff([0xFF, 0xD8]) == nil)
            #expect(BlobSignature.sniff(Array("RIFF\0\0\0\0WAVE".utf8)) == nil)
            #expect(BlobSignature.sniff([0, 0, 0, 24] + Array("ftypavif".utf8)) == nil)
            #expect(BlobSignature.sniff(Array("ftyp".utf8)) == nil)
        }
    }

    @Suite struct Routes {
        @Test func putThenGetThenConditionalGet() throws {
            let server = try BlobTestServer()
            defer { server.close() }
            let bytes = BlobSamples.png, sha = BlobSamples.sha(bytes)
            let created = try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/png"], bytes)
            #expect(created.status == 201)
            #expect(try created.json == ["sha256": .string(sha), "size": .number(JSONNumber(bytes.count)), "type": "image/png"])
            #expect(created.header("Location") == "/v1/blobs/\(sha)")
            let again = try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/png"], bytes)
            #expect(again.status == 200)
            #expect(try again.json["size"] == .number(JSONNumber(bytes.count)))

            let got = try server.send("GET", "/v1/blobs/\(sha)")
            #expect(got.status == 200 && got.body == bytes)
            #expect(got.header("Content-Type") == "image/png")
            #expect(got.header("ETag") == "\"\(sha)\"")
            #expect(got.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(got.header("Content-Length") == String(bytes.count))

            let head = try server.send("HEAD", "/v1/blobs/\(sha)")
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(bytes.count))

            for tag in ["\"\(sha)\"", "W/\"\(sha)\"", "\"other\", \"\(sha)\"", "*"] {
                let cached = try server.send("GET", "/v1/blobs/\(sha)", ["If-None-Match": tag])
                #expect(cached.status == 304 && cached.body.isEmpty && cached.header("ETag") == "\"\(sha)\"")
            }
            let stale = try server.send("GET", "/v1/blobs/\(sha)", ["If-None-Match": "\"\(String(repeating: "0", count: 64))\""])
            #expect(stale.status == 200 && stale.body == bytes)
            // Each upload is authorized twice: from its headers before the
            // body is read (`screen`), and with the whole request.
            #expect(server.authorized.withLock { $0 } == Array(repeating: "create blobs/\(sha)", count: 4)
                    + Array(repeating: "read blobs/\(sha)", count: 7))
        }

        @Test func errorsCarryTheContractsCodes() throws {
            let server = try BlobTestServer(maxBlobSize: 1000)
            defer { server.close() }
            let png = BlobSamples.png, sha = BlobSamples.sha(png)
            func expectError(_ result: BlobHTTPResult, _ status: Int, _ code: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
                #expect(result.status == status, sourceLocation: sourceLocation)
                #expect(result.header("Content-Type") == "application/json", sourceLocation: sourceLocation)
                guard case .object(let error)? = try result.json["error"] else {
                    Issue.record("no error object", sourceLocation: sourceLocation); return
                }
                #expect(error["code"] == .string(code), sourceLocation: sourceLocation)
                guard case .string(let message)? = error["message"] else { Issue.record("no message"); return }
                #expect(!message.isEmpty, sourceLocation: sourceLocation)
            }
            try expectError(try server.send("PUT", "/v1/blobs/\(sha)", [:], png), 415, "unsupported_type")
            try expectError(try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/tiff"], png), 415, "unsupported_type")
            try expectError(try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/gif"], png), 415, "unsupported_type")
            try expectError(try server.send("PUT", "/v1/blobs/\(sha.uppercased())", ["Content-Type": "image/png"], png), 400, "bad_field")
            let wrong = BlobSamples.sha(BlobSamples.jpeg)
            try expectError(try server.send("PUT", "/v1/blobs/\(wrong)", ["Content-Type": "image/png"], png), 400, "checksum_mismatch")
            let big = BlobSamples.jpeg + [UInt8](repeating: 1, count: 1000)
            let tooLarge = try server.send("PUT", "/v1/blobs/\(BlobSamples.sha(big))", ["Content-Type": "image/jpeg"], big)
            try expectError(tooLarge, 413, "too_large")
            #expect(try tooLarge.json["error"].flatMap { if case .object(let o) = $0 { o["limit"] } else { nil } } == .number(JSONNumber(1000)))
            try expectError(try server.send("GET", "/v1/blobs/\(wrong)"), 404, "not_found")
            try expectError(try server.send("GET", "/v1/blobs/\(wrong)", ["If-None-Match": "*"]), 404, "not_found")
            try expectError(try server.send("GET", "/v1/blobs/nope"), 400, "bad_field")
        }

        @Test func authorizationComesFirst() throws {
            let server = try BlobTestServer(token: "secret")
            defer { server.close() }
            let png = BlobSamples.png, sha = BlobSamples.sha(png)
            #expect(try server.send("PUT", "/v1/blobs/\(sha)", ["Content-Type": "image/png"], png).status == 401)
            #expect(try server.send("PUT", "/v1/blobs/bad", [:], []).status == 401, "no hints before authorization")
            #expect(try server.send("GET", "/v1/blobs/\(sha)").status == 401)
            let auth = ["Authorization": "Bearer secret"]
            #expect(try server.send("PUT", "/v1/blobs/\(sha)", auth.merging(["Content-Type": "image/png"]) { a, _ in a }, png).status == 201)
            #expect(try server.send("GET", "/v1/blobs/\(sha)", auth).status == 200)
        }
    }

    @Suite struct DemoPNG {
        @Test func isAValidPNG() throws {
            let png = DemoImage.png(width: 40, height: 30, seed: 1, label: "Order #12")
            let chunks = try BlobPNG.chunks(png)
            #expect(chunks.map(\.type) == ["IHDR", "IDAT", "IEND"])
            let header = chunks[0].data
            #expect(header == [0, 0, 0, 40, 0, 0, 0, 30, 8, 2, 0, 0, 0])
            #expect(chunks[2].data.isEmpty)
            let raw = try BlobPNG.inflate(chunks[1].data, expected: 30 * (1 + 40 * 3))
            #expect(raw.count == 30 * (1 + 40 * 3))
            for row in 0..<30 { #expect(raw[row * 121] <= 4, "row \(row) has a valid filter type") }
            #expect(BlobSignature.sniff(png) == "image/png")
        }

        @Test func encodeRoundTripsPixels() throws {
            var random = SplitMix64(5)
            let (width, height) = (17, 9)
            let rgb = (0..<(width * height * 3)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let chunks = try BlobPNG.chunks(DemoImage.encode(width: width, height: height, rgb: rgb))
            let raw = try BlobPNG.inflate(chunks[1].data, expected: height * (1 + width * 3))
            #expect(BlobPNG.unfilter(raw, width: width, height: height) == rgb)
        }

        @Test func storedFallbackIsAValidZlibStream() throws {
            let data = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            #expect(try BlobPNG.inflate(DemoImage.storedZlib(data), expected: data.count) == data)
            #expect(try BlobPNG.inflate(DemoImage.storedZlib([]), expected: 0) == [])
        }

        @Test func picturesDifferBySeedAndRepeatBySeed() {
            let a = DemoImage.png(width: 32, height: 32, seed: 1, label: nil)
            #expect(a == DemoImage.png(width: 32, height: 32, seed: 1, label: nil))
            #expect(a != DemoImage.png(width: 32, height: 32, seed: 2, label: nil))
            #expect(DemoImage.render(width: 32, height: 32, seed: 1) != DemoImage.render(width: 32, height: 32, seed: 2))
            #expect(a != DemoImage.png(width: 32, height: 32, seed: 1, label: "x"))
        }

        @Test func oddSizesAndLabelsDoNotCrash() throws {
            for (width, height) in [(0, 0), (-5, 3), (1, 1), (3, 200), (200, 3)] {
                let png = DemoImage.png(width: width, height: height, seed: 3, label: "é✓ long label that does not fit")
                let header = try BlobPNG.chunks(png)[0].data
                let w = Int(header[3]) | Int(header[2]) << 8, h = Int(header[7]) | Int(header[6]) << 8
                #expect(w == min(max(width, 1), DemoImage.maxSide) && h == min(max(height, 1), DemoImage.maxSide))
            }
            #expect(DemoImage.glyphs.values.allSatisfy { $0 >> 56 == 0 && ($0 & 0xE0E0E0E0E0E0E0) == 0 })
        }
    }
}

/// A server on port 0 whose application routes only what `BlobRoutes` adds,
/// the way `HubRoutes.handle` does.
final class BlobTestServer {
    let server: Server
    let data: BlobDataDirectory
    let authorized = LockedValueBox<[String]>([])

    final class Application: HTTPApplication {
        let router: HTTPRouter<HubRoutes.Route>
        init(router: HTTPRouter<HubRoutes.Route>) { self.router = router }
        func handle(_ request: HTTPRequest, context: RequestContext) -> HTTPAction {
            switch router.match(method: request.method, path: request.path) {
            case .found(.deferred(_, let start), let parameters):
                return .deferred { start(request, parameters, $0) }
            default:
                return .respond(.error(.notFound, code: "not_found", message: "not a blob route"))
            }
        }
        func screen(_ head: HTTPRequest, context: RequestContext) -> HTTPResponse? {
            guard case .found(.deferred(let screen?, _), let parameters) = router.match(method: head.method, path: head.path) else {
                return nil
            }
            return screen(head, parameters)
        }
    }

    convenience init(maxBlobSize: Int = BlobStore.defaultMaxBlobSize, quota: Int = BlobStore.defaultQuota,
                     token: String? = nil) throws {
        let data = try BlobDataDirectory()
        let blobs = try BlobStore(directory: data.path, maxBlobSize: maxBlobSize, quota: quota)
        try self.init(blobs: blobs, data: data, maxBlobSize: maxBlobSize, token: token)
    }

    /// Over `blobs`, opened already (a PostgreSQL backend).
    init(blobs: BlobStore, data: BlobDataDirectory, maxBlobSize: Int = BlobStore.defaultMaxBlobSize,
         token: String? = nil, logger: Logger = .disabled) throws {
        self.data = data
        var router = HTTPRouter<HubRoutes.Route>()
        let authorized = authorized
        BlobRoutes.add(to: &router, blobs: blobs, logger: logger) { request, operation, name in
            if let token, request.headers["Authorization"] != "Bearer \(token)" {
                return .error(.unauthorized, code: "unauthorized", message: "send a token")
            }
            authorized.withLock { $0.append("\(operation) \(name)") }
            return nil
        }
        var configuration = ServerConfiguration.forTests(threads: 1, shutdownGraceMillis: 1_000)
        configuration.httpLimits.maxBodyBytes = maxBlobSize + (64 << 10)
        server = try Server(configuration: configuration, application: Application(router: router))
    }

    func close() { server.shutdown() }

    func send(_ method: String, _ target: String, _ headers: [String: String] = [:],
              _ body: [UInt8]? = nil) throws -> BlobHTTPResult {
        try BlobHTTPResult.fetch(port: server.port, method, target, headers, body)
    }
}

struct BlobHTTPResult {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    /// One request with a binary body on a fresh connection; reads until the
    /// server closes it (`Connection: close`), so HEAD and 304 need no framing.
    static func fetch(port: Int, _ method: String, _ target: String, _ headers: [String: String] = [:],
                      _ body: [UInt8]? = nil) throws -> BlobHTTPResult {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        defer { Glibc.close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = INADDR_LOOPBACK.bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { throw TestFailure("connect: errno \(errno)") }
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        let bytes = Array((head + "\r\n").utf8) + (body ?? [])
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TestFailure("send: errno \(errno)") }
            sent += n
        }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw TestFailure("recv: errno \(errno) after \(received.count) bytes") }
            if n == 0 { break }
            received += chunk[..<n]
        }
        return try BlobHTTPResult(received)
    }

    init(_ bytes: [UInt8]) throws {
        let marker: [UInt8] = [13, 10, 13, 10]
        guard let end = (0..<max(0, bytes.count - 3)).first(where: { Array(bytes[$0..<($0 + 4)]) == marker }) else {
            throw TestFailure("no complete head in \(bytes.count) bytes")
        }
        let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw TestFailure("bad status line \(lines[0])") }
        self.status = status
        headers = lines.dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), String(line[line.index(after: colon)...].drop { $0 == " " }))
        }
        body = Array(bytes[(end + 4)...])
    }

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    var json: JSONObject {
        get throws {
            guard case .object(let object) = try JSONValue.parse(body) else { throw TestFailure("not a JSON object") }
            return object
        }
    }
}

/// An independent reading of PNG files for the tests: chunks with their CRCs
/// checked bit by bit (not with zlib's table), and zlib's `uncompress`.
enum BlobPNG {
    static func chunks(_ png: [UInt8]) throws -> [(type: String, data: [UInt8])] {
        guard png.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) else { throw TestFailure("no PNG signature") }
        var chunks: [(type: String, data: [UInt8])] = []
        var offset = 8
        func uint32(_ at: Int) -> UInt32 { png[at..<(at + 4)].reduce(0) { $0 << 8 | UInt32($1) } }
        while offset < png.count {
            guard offset + 12 <= png.count else { throw TestFailure("truncated chunk at \(offset)") }
            let length = Int(uint32(offset))
            guard offset + 12 + length <= png.count else { throw TestFailure("chunk overruns the file") }
            let typed = Array(png[(offset + 4)..<(offset + 8 + length)])
            guard crc32(typed) == uint32(offset + 8 + length) else { throw TestFailure("bad CRC at \(offset)") }
            chunks.append((String(decoding: typed[..<4], as: UTF8.self), Array(typed[4...])))
            offset += 12 + length
        }
        return chunks
    }

    /// CRC-32 (ISO 3309, reflected polynomial 0xEDB88320), as RFC 2083 §3.4 defines it.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    static func inflate(_ stream: [UInt8], expected: Int) throws -> [UInt8] {
        var output = [UInt8](repeating: 0, count: expected + 1)
        var length = uLongf(output.count)
        let rc = output.withUnsafeMutableBufferPointer { out in
            stream.withUnsafeBufferPointer { uncompress(out.baseAddress, &length, $0.baseAddress, uLong($0.count)) }
        }
        guard rc == Z_OK else { throw TestFailure("uncompress failed: \(rc)") }
        return Array(output[..<Int(length)])
    }

    /// Undoes the five PNG filters (RFC 2083 §6).
    static func unfilter(_ raw: [UInt8], width: Int, height: Int) -> [UInt8] {
        let stride = width * 3
        var pixels = [UInt8](repeating: 0, count: stride * height)
        for y in 0..<height {
            let filter = raw[y * (stride + 1)]
            for i in 0..<stride {
                let x = raw[y * (stride + 1) + 1 + i]
                let a = i >= 3 ? Int(pixels[y * stride + i - 3]) : 0
                let b = y > 0 ? Int(pixels[(y - 1) * stride + i]) : 0
                let c = i >= 3 && y > 0 ? Int(pixels[(y - 1) * stride + i - 3]) : 0
                let predictor: Int
                switch filter {
                case 1: predictor = a
                case 2: predictor = b
                case 3: predictor = (a + b) / 2
                case 4:
                    let p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c)
                    predictor = pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)
                default: predictor = 0
                }
                pixels[y * stride + i] = x &+ UInt8(predictor & 0xFF)
            }
        }
        return pixels
    }
}
