@preconcurrency import Glibc
import TallyImaging
import TallyStore

/// Smaller copies of the photos (`GET /v1/blobs/{sha256}?w=N`), made once
/// and kept beside the original, so a board of cards pays kilobytes per
/// card, not a phone camera's megabytes.
///
/// A thumbnail is derived data: made from the original with
/// `PhotoDecoder.thumbnail` (upright, at most N × N, metadata stripped,
/// JPEG or WebP), kept in `<data>/blobs/thumbs/ab/<sha256>-<N>.<format>` on
/// disk, in `tally_blob_thumbs` on PostgreSQL, in a dictionary in memory.
/// It is never counted in `blobQuota` (every width in both formats adds
/// about 3 % to a 12 MP photo's bytes: BENCHMARKS.md, "Thumbnails"; at
/// most ten per photo, so they grow only with the photos the quota
/// bounds), and `tally backup` does not copy it: any thumbnail may be
/// deleted and is made again on the next request.
///
/// The original is never touched: thumbnails live under their own names.
/// Two first requests at once may both make it (on two worker threads);
/// both keep the same name through `BlobFiles.write` (temporary file,
/// fsync, link), so a reader sees one complete file or none, never a torn
/// one, and the second copy is dropped.
extension BlobStore {
    /// The widths a client may ask for, in pixels: a card's photo on any
    /// screen density (64–256), a list or a detail view (512–1024).
    public static let thumbnailWidths = [64, 128, 256, 512, 1024]
    /// Under `<data>/blobs/`: not two characters long, so the originals'
    /// walks (quota, backup, import) never enter it.
    static let thumbnailDirectory = "thumbs"
    /// JPEG and WebP quality: indistinguishable from the original at the
    /// size they are drawn, at about a tenth of the bytes of quality 95.
    static let thumbnailQuality = 80

    /// One thumbnail of one photo.
    struct ThumbnailKey: Sendable, Hashable {
        var sha256: String
        var width: Int
        var format: PhotoDecoder.Format

        /// Its name on disk and in memory: the photo's name, the width, the format.
        var fileName: String { "\(sha256)-\(width).\(format.rawValue)" }
        /// Distinct from the original's ETag (`"<sha256>"`) and from every
        /// other width and format, so a cache keeps each apart.
        var etag: String { "\"\(fileName)\"" }
    }

    /// The thumbnail's bytes and type, made now or read from where it was
    /// kept; nil when no photo has the name.
    ///
    /// Blocks for up to a second while a large photo is decoded: call it on
    /// a worker thread (`BlobRoutes` runs it on `BlobWorkers`).
    ///
    /// - Throws: `.undecodablePhoto` with the decoder's reason when the
    ///   stored bytes are no image it can read, `.storageFailed` or
    ///   `.databaseFailed` when the store fails.
    func thumbnail(_ key: ThumbnailKey) throws(BlobError) -> (bytes: [UInt8], type: String, made: Bool)? {
        try BlobStore.validate(sha256: key.sha256)
        guard BlobStore.thumbnailWidths.contains(key.width) else { throw .badWidth(String(key.width)) }
        if let kept = try keptThumbnail(key) {
            thumbnailsReused.add(1, ordering: .relaxed)
            return (kept, key.format.contentType, false)
        }
        guard let original = try get(sha256: key.sha256) else { return nil }
        let bytes: [UInt8]
        do throws(ImageError) {
            bytes = try PhotoDecoder.thumbnail(original.bytes, width: key.width, format: key.format,
                                               quality: BlobStore.thumbnailQuality)
        } catch {
            throw BlobError(error)
        }
        try keep(key, bytes)
        thumbnailsMade.add(1, ordering: .relaxed)
        return (bytes, key.format.contentType, true)
    }

    /// The kept copy, or nil.
    func keptThumbnail(_ key: ThumbnailKey) throws(BlobError) -> [UInt8]? {
        switch backend {
        case .memory: return thumbnailMemory.withLock { $0[key.fileName] }
        case .disk:
            guard let files = thumbnailFiles else { return nil }
            return try files.read(key.fileName)
        case .database(let table):
            do throws(SharedTableError) {
                return try table.readThumbnail(key.sha256, width: key.width, format: key.format.rawValue)
            } catch {
                throw BlobError(error)
            }
        }
    }

    /// Keeps a thumbnail made from a stored photo; one already kept under
    /// its name stays (the bytes are as good).
    private func keep(_ key: ThumbnailKey, _ bytes: [UInt8]) throws(BlobError) {
        switch backend {
        case .memory:
            thumbnailMemory.withLock { kept in
                if kept[key.fileName] == nil { kept[key.fileName] = bytes }
            }
        case .disk(let originals):
            guard let files = thumbnailFiles else { return }
            if access(files.root, F_OK) != 0 {
                // The first thumbnail of this data directory: `thumbs/`
                // appears, mode 0700 like the photos.
                try files.prepare(dataDirectory: originals.root)
            }
            _ = try files.write(key.fileName, bytes)
        case .database(let table):
            do throws(SharedTableError) {
                try table.insertThumbnail(key.sha256, width: key.width, format: key.format.rawValue, bytes: bytes)
            } catch {
                throw BlobError(error)
            }
        }
    }
}
