@preconcurrency import Glibc
import COpenSSL
import Synchronization
import TallyConcurrency
import TallyNet
import TallyStore

/// Content-addressed storage for photos: a blob's name is the SHA-256 of its
/// bytes, so a blob never changes, uploads are idempotent and any cache may
/// keep it forever.
///
/// On disk a blob lives at `<data>/blobs/ab/abcdef…` (a two-level fan-out on
/// the first two hex digits, as git does for loose objects, so no directory
/// grows past a few thousand entries). There is no sidecar: the type is read
/// back from the bytes' signature, which `put` has already checked against
/// the declared type. With no directory (`--data :memory:`) blobs live in a
/// dictionary and vanish with the process. A hub on PostgreSQL keeps them
/// in the database instead (`PostgresBlobTable`), so that every hub sharing
/// it serves a photo any of them stored.
///
/// The blobs together may hold at most `quota` bytes, so photos cannot
/// fill the disk the records need: an upload that would pass it is refused
/// (`quota_exceeded`) before anything is written. The total is counted once
/// at open and then moved by each upload; an upload reserves its size
/// before writing, so concurrent uploads cannot pass the quota together.
/// With several hubs on one database, each counts the total once at start
/// (one SUM) and then moves it by its own uploads only: each enforces the
/// quota on what it read plus what it stored, not on the others' uploads
/// since its start.
///
/// Safe to call from any thread. `put` hashes and fsyncs (or waits for the
/// database), so callers run it off the event loop (see `BlobRoutes`).
public final class BlobStore: Sendable {
    /// 16 MiB: a full-resolution phone photo with room to spare (contract,
    /// "Blobs": config `maxBlobSize`).
    public static let defaultMaxBlobSize = 16 << 20
    /// 10 GiB: about 3,000 full-resolution phone photos, a stock room's
    /// intake for a long while, and small beside today's disks; an operator
    /// with more room raises it (config `blobQuota`, `--blob-quota`).
    public static let defaultQuota = 10 << 30

    /// Largest blob `put` accepts, in bytes.
    public let maxBlobSize: Int
    /// Most bytes all blobs together may hold.
    public let quota: Int
    /// Bytes of the blobs stored, plus those of uploads being written.
    let used: Atomic<Int>
    let backend: Backend
    /// Where a disk store keeps its thumbnails: `<data>/blobs/thumbs/`,
    /// created with the first one (BlobStore+Thumbnails.swift).
    let thumbnailFiles: BlobFiles?
    /// A memory store's thumbnails, by `ThumbnailKey.fileName`.
    let thumbnailMemory = LockedValueBox<[String: [UInt8]]>([:])
    /// Thumbnails made, and served from a kept copy (`/metrics`).
    let thumbnailsMade = Atomic<Int>(0)
    let thumbnailsReused = Atomic<Int>(0)

    enum Backend: Sendable {
        case memory(LockedValueBox<[String: [UInt8]]>)
        case disk(BlobFiles)
        case database(PostgresBlobTable)
    }

    /// Opens (creating when missing) the blob store of a data directory.
    ///
    /// - Parameters:
    ///   - directory: the hub's data directory; blobs go under
    ///     `<directory>/blobs/`. Nil keeps blobs in memory.
    ///   - maxBlobSize: the largest blob `put` accepts.
    ///   - quota: the most bytes all blobs together may hold.
    /// - Throws: `.storageFailed` when the directory cannot be created.
    public init(directory: String?, maxBlobSize: Int = BlobStore.defaultMaxBlobSize,
                quota: Int = BlobStore.defaultQuota) throws(BlobError) {
        self.maxBlobSize = max(0, maxBlobSize)
        self.quota = max(0, quota)
        if let directory {
            let files = BlobFiles(root: directory + "/blobs")
            try files.prepare(dataDirectory: directory)
            backend = .disk(files)
            used = Atomic(files.totalBytes())
            thumbnailFiles = BlobFiles(root: files.root + "/" + BlobStore.thumbnailDirectory)
            // A crash while keeping a thumbnail leaves a temporary file.
            thumbnailFiles?.removeAbandonedTemporaryFiles()
        } else {
            backend = .memory(LockedValueBox([:]))
            used = Atomic(0)
            thumbnailFiles = nil
        }
    }

    /// Opens the photo table of a PostgreSQL database (creating it with the
    /// schema when missing) and counts its bytes once.
    ///
    /// - Parameters:
    ///   - url: `postgres://USER@HOST:PORT/DB`, as the hub's store.
    ///   - connections: the most sessions open at once (one per thread
    ///     storing or reading a photo at the same moment).
    /// - Throws: `.databaseFailed` when the database cannot be reached or
    ///   refuses.
    public init(postgres url: String, maxBlobSize: Int = BlobStore.defaultMaxBlobSize,
                quota: Int = BlobStore.defaultQuota, connections: Int = 4) throws(BlobError) {
        self.maxBlobSize = max(0, maxBlobSize)
        self.quota = max(0, quota)
        do throws(SharedTableError) {
            let table = try PostgresBlobTable(url: url, connections: connections)
            backend = .database(table)
            thumbnailFiles = nil
            used = Atomic(try table.totalBytes())
        } catch {
            throw BlobError(error)
        }
    }

    /// Closes the database sessions of a PostgreSQL backend; later calls
    /// fail. Nothing to do for the others.
    public func close() {
        if case .database(let table) = backend { table.close() }
    }

    /// Bytes the stored blobs hold (and uploads being written).
    public var usedBytes: Int { used.load(ordering: .relaxed) }

    /// The blob gauges for `/metrics`.
    var prometheusText: String {
        "# HELP tally_blob_bytes Bytes the stored blobs (photos) hold.\n# TYPE tally_blob_bytes gauge\n"
            + "tally_blob_bytes \(usedBytes)\n"
            + "# HELP tally_blob_quota_bytes Most bytes the blobs may hold (blobQuota).\n"
            + "# TYPE tally_blob_quota_bytes gauge\ntally_blob_quota_bytes \(quota)\n"
            + "# HELP tally_thumbnails_made_total Thumbnails made from a stored photo (GET /v1/blobs/{sha256}?w=N).\n"
            + "# TYPE tally_thumbnails_made_total counter\n"
            + "tally_thumbnails_made_total \(thumbnailsMade.load(ordering: .relaxed))\n"
            + "# HELP tally_thumbnails_reused_total Thumbnails served from the copy kept when first made.\n"
            + "# TYPE tally_thumbnails_reused_total counter\n"
            + "tally_thumbnails_reused_total \(thumbnailsReused.load(ordering: .relaxed))\n"
    }

    /// Verifies and stores a blob; storing one that is already there is a
    /// no-op that still verifies.
    ///
    /// Checks run cheapest first, so a refused upload costs no hashing:
    /// the name, the declared type, the size, the signature, then the hash.
    ///
    /// - Parameters:
    ///   - sha256: the name the client chose: 64 lowercase hex digits.
    ///   - contentType: the request's `Content-Type` (parameters ignored).
    /// - Returns: whether this call stored it (`created`) and its type.
    public func put(sha256: String, contentType: String?, bytes: [UInt8]) throws(BlobError) -> (created: Bool, type: String) {
        let type = try check(sha256: sha256, contentType: contentType, bytes: bytes)
        let actual = try BlobStore.sha256Hex(bytes)
        guard actual == sha256 else { throw .checksumMismatch(expected: sha256, actual: actual) }
        // Storing one that is there already takes no room: never refused.
        if exists(sha256: sha256) { return (false, type) }
        try reserve(bytes.count)
        let created: Bool
        do throws(BlobError) {
            switch backend {
            case .memory(let blobs):
                created = blobs.withLock { blobs in
                    guard blobs[sha256] == nil else { return false }
                    blobs[sha256] = bytes
                    return true
                }
            case .disk(let files):
                created = try files.write(sha256, bytes)
            case .database(let table):
                do throws(SharedTableError) {
                    created = try table.insert(sha256, type: type, bytes: bytes)
                } catch {
                    throw BlobError(error)
                }
            }
        } catch {
            used.subtract(bytes.count, ordering: .relaxed)
            throw error
        }
        // Another upload of the same blob won the race and counted it.
        if !created { used.subtract(bytes.count, ordering: .relaxed) }
        return (created, type)
    }

    /// Counts `size` bytes as used, unless that would pass the quota.
    private func reserve(_ size: Int) throws(BlobError) {
        var current = used.load(ordering: .relaxed)
        while true {
            guard size <= quota - current else { throw .quotaExceeded(size: size, used: current, quota: quota) }
            let (exchanged, found) = used.compareExchange(expected: current, desired: current + size,
                                                          ordering: .relaxed)
            if exchanged { return }
            current = found
        }
    }

    /// The checks of `put` that need no hashing and no disk, so a caller can
    /// refuse a bad upload at once. Returns the canonical type.
    public func check(sha256: String, contentType: String?, bytes: [UInt8]) throws(BlobError) -> String {
        try BlobStore.validate(sha256: sha256)
        let type = try BlobSignature.declaredType(contentType)
        guard bytes.count <= maxBlobSize else { throw .tooLarge(size: bytes.count, limit: maxBlobSize) }
        let found = BlobSignature.sniff(bytes)
        guard found == type else { throw .signatureMismatch(declared: type, found: found, empty: bytes.isEmpty) }
        return type
    }

    /// The blob's bytes and type (sniffed from its signature), or nil when
    /// it is not stored.
    ///
    /// - Throws: `.badSHA256` for a malformed name, `.storageFailed` when
    ///   the file exists but cannot be read.
    public func get(sha256: String) throws(BlobError) -> (bytes: [UInt8], type: String)? {
        try BlobStore.validate(sha256: sha256)
        let bytes: [UInt8]?
        switch backend {
        case .memory(let blobs): bytes = blobs.withLock { $0[sha256] }
        case .disk(let files): bytes = try files.read(sha256)
        case .database(let table):
            do throws(SharedTableError) { bytes = try table.read(sha256) } catch { throw BlobError(error) }
        }
        guard let bytes else { return nil }
        // A file that matches no signature was damaged outside the hub; it
        // is still served, as opaque bytes.
        return (bytes, BlobSignature.sniff(bytes) ?? "application/octet-stream")
    }

    /// Whether the blob is stored; false for a malformed name, and when the
    /// database cannot say (the `put` or `get` that follows then fails with
    /// the reason).
    public func exists(sha256: String) -> Bool {
        guard (try? BlobStore.validate(sha256: sha256)) != nil else { return false }
        switch backend {
        case .memory(let blobs): return blobs.withLock { $0[sha256] != nil }
        case .disk(let files): return files.exists(sha256)
        case .database(let table): return (try? table.contains(sha256)) ?? false
        }
    }

    /// Names are exactly 64 lowercase hex digits: one spelling per blob, so
    /// the name is also a safe file name (no `/`, no `..`).
    static func validate(sha256: String) throws(BlobError) {
        let utf8 = sha256.utf8
        guard utf8.count == 64, utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            throw .badSHA256(sha256)
        }
    }

    /// Lowercase hex SHA-256 (FIPS 180-4) of `bytes`, through OpenSSL's
    /// one-shot `EVP_Digest`.
    static func sha256Hex(_ bytes: [UInt8]) throws(BlobError) -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBytes { source in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(source.baseAddress, source.count, output.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        guard ok == 1, length == 32 else { throw .storageFailed(operation: "hash the upload", path: "", errno: 0) }
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// The image types the hub stores and their magic numbers.
enum BlobSignature {
    static let types = ["image/jpeg", "image/png", "image/webp", "image/gif", "image/heic"]

    /// The canonical type of a `Content-Type` value: parameters dropped,
    /// case folded (RFC 9110 §8.3.1: type and subtype are case-insensitive).
    static func declaredType(_ contentType: String?) throws(BlobError) -> String {
        guard let contentType else { throw .unsupportedType(nil) }
        let media = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let type = media.trimmingSpaces().lowercased()
        guard types.contains(type) else { throw .unsupportedType(contentType.isEmpty ? nil : String(type)) }
        return type
    }

    /// The type whose signature `bytes` start with, or nil.
    ///
    /// JPEG: SOI + the first marker's FF (`FF D8 FF`). PNG: the 8-byte
    /// signature (RFC 2083 §3.1). GIF: `GIF87a`/`GIF89a`. WebP: a RIFF
    /// container of form `WEBP` (RFC 9649 §2.5). HEIC: an ISO BMFF `ftyp`
    /// box (ISO/IEC 14496-12 §4.3) whose major brand is a HEIF brand
    /// (ISO/IEC 23008-12 Annex B: heic, heix, hevc, hevx, heim, heis, mif1,
    /// msf1).
    static func sniff(_ bytes: [UInt8]) -> String? {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            bytes.count >= offset + prefix.count && bytes[offset..<(offset + prefix.count)].elementsEqual(prefix)
        }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return "image/gif" }
        if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return "image/webp" }
        if starts(Array("ftyp".utf8), at: 4), bytes.count >= 12 {
            let brand = String(decoding: bytes[8..<12], as: UTF8.self)
            if ["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"].contains(brand) { return "image/heic" }
        }
        return nil
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs (HTTP's OWS).
    fileprivate func trimmingSpaces() -> Substring {
        var slice = self
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return slice
    }
}
