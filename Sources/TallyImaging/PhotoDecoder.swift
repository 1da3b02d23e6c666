import CVips

/// Photos in, pixels or smaller photos out, through libvips: JPEG, PNG,
/// WebP, GIF and HEIC (libheif), turned upright by their EXIF orientation
/// and shrunk while loading where the format allows, so a 12 MP JPEG never
/// exists at full size in memory.
///
/// Thread-safe: each call builds and frees its own pipeline (libvips's
/// operation cache is off, so memory stays flat however many photos pass).
/// Calls block for up to a second on a large photo: run them off the event
/// loops.
public enum PhotoDecoder {
    /// 100 megapixels: past any phone's camera. The header says how large a
    /// photo is before anything is decoded, so a 16 MiB PNG claiming a
    /// 50,000 × 50,000 canvas is refused without taking the memory.
    public static let maxPixels = 100_000_000

    /// Starts libvips once per process (thread-safe: Swift runs a global's
    /// initialiser once).
    private static let started: String? = {
        if tally_vips_start() != 0 { return lastError() }
        return nil
    }()

    /// The stored width and height, from the header alone.
    public static func size(of bytes: [UInt8]) throws(ImageError) -> (width: Int, height: Int) {
        try start()
        let image: UnsafeMutablePointer<VipsImage>? = bytes.withUnsafeBytes { tally_vips_header($0.baseAddress, $0.count) }
        guard let image else { throw .undecodable(lastError()) }
        defer { g_object_unref(image) }
        return (Int(vips_image_get_width(image)), Int(vips_image_get_height(image)))
    }

    /// The photo in grey, upright, fitted within `maxSide` × `maxSide`
    /// (never enlarged).
    ///
    /// - Parameter strict: refuse a truncated or damaged file rather than
    ///   return what could be decoded of it (analysis wants to say why it
    ///   found nothing; a thumbnail would rather show half a photo).
    public static func grey(_ bytes: [UInt8], maxSide: Int, strict: Bool = true) throws(ImageError) -> GreyImage {
        try checkSize(bytes)
        if strict, let missing = truncation(of: bytes) { throw .undecodable("truncated: \(missing)") }
        return try withThumbnail(bytes, width: maxSide, height: maxSide, strict: strict) { image throws(ImageError) in
            guard let grey = tally_vips_grey(image) else { throw .undecodable(lastError()) }
            defer { g_object_unref(grey) }
            let width = Int(vips_image_get_width(grey)), height = Int(vips_image_get_height(grey))
            var failed = false
            let pixels = [UInt8](unsafeUninitializedCapacity: width * height) { buffer, count in
                failed = tally_vips_pixels(grey, buffer.baseAddress, buffer.count) != 0
                count = failed ? 0 : buffer.count
            }
            if failed { throw .undecodable(lastError()) }
            return GreyImage(width: width, height: height, pixels: pixels)
        }
    }

    /// Formats a smaller copy can be written in.
    public enum Format: String, Sendable {
        case jpeg, webp, png

        public var contentType: String { "image/\(rawValue)" }
    }

    /// A copy at most `width` pixels wide (and as tall, for a tall photo:
    /// the box is square), upright, metadata stripped, encoded as `format`.
    /// A photo smaller than that keeps its size (re-encoded).
    public static func thumbnail(_ bytes: [UInt8], width: Int, format: Format = .jpeg,
                                 quality: Int = 80) throws(ImageError) -> [UInt8] {
        try checkSize(bytes)
        return try withThumbnail(bytes, width: width, height: width, strict: false) { image throws(ImageError) in
            try encode(image, format: format, quality: quality)
        }
    }

    /// Grey pixels as an image file (tests and benchmarks make their
    /// photos with it).
    public static func encode(_ grey: GreyImage, format: Format, quality: Int = 90) throws(ImageError) -> [UInt8] {
        try start()
        let made: UnsafeMutablePointer<VipsImage>? = grey.pixels.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(grey.width), Int32(grey.height), 1,
                                            VIPS_FORMAT_UCHAR)
        }
        guard let image = made else { throw .undecodable(lastError()) }
        defer { g_object_unref(image) }
        return try encode(image, format: format, quality: quality)
    }

    private static func encode(_ image: UnsafeMutablePointer<VipsImage>, format: Format,
                               quality: Int) throws(ImageError) -> [UInt8] {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let failed = switch format {
        case .jpeg: tally_vips_jpeg(image, Int32(quality), &buffer, &length)
        case .webp: tally_vips_webp(image, Int32(quality), &buffer, &length)
        case .png: tally_vips_png(image, &buffer, &length)
        }
        guard failed == 0, let buffer else { throw .undecodable(lastError()) }
        defer { g_free(buffer) }
        return [UInt8](UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// What a cut-off file lacks, for the formats whose end is marked:
    /// libvips decodes what there is of a truncated JPEG and greys the rest
    /// (libjpeg's "premature end" is only a warning), which would analyse
    /// as a photo with nothing in it.
    static func truncation(of bytes: [UInt8]) -> String? {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            bytes.count >= offset + prefix.count && Array(bytes[offset..<offset + prefix.count]) == prefix
        }
        if starts([0xFF, 0xD8, 0xFF]) {
            // The end-of-image marker, give or take padding some cameras add.
            let tail = bytes.suffix(4096)
            return zip(tail, tail.dropFirst()).contains { $0 == 0xFF && $1 == 0xD9 } ? nil : "the JPEG has no end-of-image marker"
        }
        if starts([0x89, 0x50, 0x4E, 0x47]) {
            return starts(Array("IEND".utf8), at: max(0, bytes.count - 8)) ? nil : "the PNG has no IEND chunk"
        }
        if starts(Array("RIFF".utf8)), bytes.count >= 8 {
            let declared = Int(bytes[4]) | Int(bytes[5]) << 8 | Int(bytes[6]) << 16 | Int(bytes[7]) << 24
            return declared + 8 <= bytes.count ? nil : "the WebP file is \(bytes.count) bytes of the \(declared + 8) it declares"
        }
        return nil
    }

    // MARK: -

    private static func start() throws(ImageError) {
        if let failure = started { throw .unavailable(failure) }
    }

    private static func checkSize(_ bytes: [UInt8]) throws(ImageError) {
        let (width, height) = try size(of: bytes)
        guard width * height <= maxPixels else { throw .tooLarge(width: width, height: height, limit: maxPixels) }
    }

    /// Runs `body` on the shrunk image while the bytes it reads from are
    /// alive: libvips evaluates lazily, so the pixels are decoded inside.
    private static func withThumbnail<T>(_ bytes: [UInt8], width: Int, height: Int, strict: Bool,
                                         _ body: (UnsafeMutablePointer<VipsImage>) throws(ImageError) -> T) throws(ImageError) -> T {
        try start()
        // A truncated JPEG is only a libjpeg warning ("premature end"):
        // strict means any warning at all.
        let failOn = strict ? VIPS_FAIL_ON_WARNING : VIPS_FAIL_ON_NONE
        let result: Result<T, ImageError> = bytes.withUnsafeBytes { raw in
            guard let image = tally_vips_thumbnail(raw.baseAddress, raw.count, Int32(max(1, width)),
                                                   Int32(max(1, height)), failOn) else {
                return .failure(.undecodable(lastError()))
            }
            defer { g_object_unref(image) }
            do throws(ImageError) { return .success(try body(image)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// libvips's error text (and clears it), one line, without its
    /// trailing newline.
    private static func lastError() -> String {
        guard let text = vips_error_buffer_copy() else { return "unknown error" }
        defer { g_free(text) }
        let lines = String(cString: text).split(separator: "\n").map(String.init)
        return lines.isEmpty ? "unknown error" : lines.joined(separator: "; ")
    }
}
