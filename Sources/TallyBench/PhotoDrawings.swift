import CVips
import TallyImaging

/// Photos made in the bench, never downloaded: a mottled colour "shelf" with
/// a white label on it carrying an EAN-13 (from its tables), a Data Matrix
/// (libdmtx's own encoder) and printed text (a 5 × 7 pixel font), encoded
/// by libvips as a camera would (colour, three bands).
public enum PhotoDrawings {
    /// What every photo carries, for checking what the readers found.
    public static let ean = "4006381333931"
    public static let serial = "SN-4711"
    public static let textLines = ["ACME WIDGET", "SN-4711", "LOT 2024"]

    /// One photo of `width` × `height` (varied by `seed`) as `format`;
    /// without `label`, the background alone (a photo with no code or text).
    /// - Throws: the encoder's refusal.
    public static func photo(width: Int, height: Int, seed: UInt64, format: PhotoDecoder.Format,
                             quality: Int = 85, label: Bool = true) throws(ImageError) -> [UInt8] {
        var grey = canvas(width: width, height: height, seed: seed)
        guard label else {
            return try encode(colour(grey, width: width, height: height, seed: seed), width: width, height: height,
                              format: format, quality: quality)
        }
        // The label: about a third of the photo's width, placed by the seed.
        let scale = max(1, width / 700)   // pixels per EAN module: 5 at 4000 wide
        let labelWidth = 190 * scale, labelHeight = 150 * scale
        let x0 = Int(seed % 7) * max(1, (width - labelWidth) / 8) + scale * 8
        let y0 = Int(seed % 5) * max(1, (height - labelHeight) / 6) + scale * 8
        fill(&grey, width: width, x: x0, y: y0, w: min(labelWidth, width - x0), h: min(labelHeight, height - y0), value: 235)
        CodeDrawing.stamp(CodeDrawing.ean13(ean, height: 40), scale: scale, quiet: 10, at: x0 + 4 * scale, y0 + 4 * scale, into: &grey, width: width)
        var textY = y0 + 70 * scale
        for line in textLines {
            text(line, pixel: 2 * scale, at: x0 + 14 * scale, textY, into: &grey, width: width)
            textY += 20 * scale
        }
        CodeDrawing.stamp(CodeDrawing.dataMatrix(serial), scale: 3 * scale, quiet: 2, at: x0 + 128 * scale, y0 + 8 * scale, into: &grey, width: width)
        return try encode(colour(grey, width: width, height: height, seed: seed), width: width, height: height,
                          format: format, quality: quality)
    }

    /// A mottled grey background: a gradient, blotches 16 pixels square and
    /// fine grain (a fixed pseudo-random pattern per seed, so runs repeat).
    static func canvas(width: Int, height: Int, seed: UInt64) -> [UInt8] {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 &+ 1
        func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state >> 33
        }
        let cellsX = width / 16 + 1, cellsY = height / 16 + 1
        let blotch = (0..<(cellsX * cellsY)).map { _ in Int(next() % 31) - 15 }
        var pixels = [UInt8](repeating: 0, count: width * height)
        pixels.withUnsafeMutableBufferPointer { out in
            for y in 0..<height {
                let row = y * width, cellRow = (y / 16) * cellsX
                for x in 0..<width {
                    let value = 110 + (x + y) * 50 / (width + height) + blotch[cellRow + x / 16] + Int(next() & 7)
                    out[row + x] = UInt8(clamping: value)
                }
            }
        }
        return pixels
    }

    static func fill(_ pixels: inout [UInt8], width: Int, x: Int, y: Int, w: Int, h: Int, value: UInt8) {
        guard w > 0, h > 0 else { return }
        for row in y..<(y + h) { for column in x..<(x + w) { pixels[row * width + column] = value } }
    }

    /// 5 × 7 glyphs (rows top down, bit 4 the left column) for the label's
    /// characters; others draw as blanks.
    static let font: [Character: [UInt8]] = [
        "0": [14, 17, 19, 21, 25, 17, 14], "1": [4, 12, 4, 4, 4, 4, 14], "2": [14, 17, 1, 2, 4, 8, 31],
        "4": [2, 6, 10, 18, 31, 2, 2], "7": [31, 1, 2, 4, 8, 8, 8],
        "A": [14, 17, 17, 31, 17, 17, 17], "C": [14, 17, 16, 16, 16, 17, 14], "D": [30, 17, 17, 17, 17, 17, 30],
        "E": [31, 16, 16, 30, 16, 16, 31], "G": [14, 17, 16, 23, 17, 17, 15], "I": [14, 4, 4, 4, 4, 4, 14],
        "L": [16, 16, 16, 16, 16, 16, 31], "M": [17, 27, 21, 21, 17, 17, 17], "N": [17, 25, 21, 19, 17, 17, 17],
        "O": [14, 17, 17, 17, 17, 17, 14], "S": [15, 16, 16, 14, 1, 1, 30], "T": [31, 4, 4, 4, 4, 4, 4],
        "W": [17, 17, 17, 21, 21, 21, 10], "-": [0, 0, 0, 31, 0, 0, 0],
    ]

    /// Prints `line` in black at (x, y), each font pixel `pixel` pixels square.
    static func text(_ line: String, pixel: Int, at x: Int, _ y: Int, into pixels: inout [UInt8], width: Int) {
        let height = pixels.count / width
        var left = x
        for character in line {
            let glyph = font[character] ?? [0, 0, 0, 0, 0, 0, 0]
            for (row, bits) in glyph.enumerated() {
                for column in 0..<5 where bits & (16 >> UInt8(column)) != 0 {
                    for dy in 0..<pixel where y + row * pixel + dy < height {
                        for dx in 0..<pixel where left + column * pixel + dx < width {
                            pixels[(y + row * pixel + dy) * width + left + column * pixel + dx] = 25
                        }
                    }
                }
            }
            left += 6 * pixel
        }
    }

    /// Three bands: the grey tinted by a slow colour cast that varies with
    /// the seed (a camera's photo is colour; its decoding costs more).
    static func colour(_ grey: [UInt8], width: Int, height: Int, seed: UInt64) -> [UInt8] {
        var rgb = [UInt8](repeating: 0, count: grey.count * 3)
        let tint = Int(seed % 3)
        rgb.withUnsafeMutableBufferPointer { out in
            grey.withUnsafeBufferPointer { src in
                for i in 0..<src.count {
                    let v = Int(src[i]), cast = (i % width) * 24 / width - 12
                    out[3 * i] = UInt8(clamping: v + (tint == 0 ? cast : 0))
                    out[3 * i + 1] = UInt8(clamping: v + (tint == 1 ? cast : 0))
                    out[3 * i + 2] = UInt8(clamping: v + (tint == 2 ? cast : -cast / 2))
                }
            }
        }
        return rgb
    }

    /// sRGB pixels as `format`, through the shim's savers.
    static func encode(_ rgb: [UInt8], width: Int, height: Int, format: PhotoDecoder.Format,
                       quality: Int) throws(ImageError) -> [UInt8] {
        // libvips starts with the first PhotoDecoder call.
        _ = try? PhotoDecoder.size(of: [])
        let made: UnsafeMutablePointer<VipsImage>? = rgb.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(width), Int32(height), 3, VIPS_FORMAT_UCHAR)
        }
        guard let image = made else { throw .undecodable("libvips could not wrap the pixels") }
        defer { g_object_unref(image) }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let failed = switch format {
        case .jpeg: tally_vips_jpeg(image, Int32(quality), &buffer, &length)
        case .webp: tally_vips_webp(image, Int32(quality), &buffer, &length)
        case .png: tally_vips_png(image, &buffer, &length)
        }
        guard failed == 0, let buffer else { throw .undecodable("libvips could not encode a \(format.rawValue)") }
        defer { g_free(buffer) }
        return [UInt8](UnsafeRawBufferPointer(start: buffer, count: length))
    }
}
