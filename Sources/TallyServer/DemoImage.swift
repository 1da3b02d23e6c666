import CZlib
@preconcurrency import Glibc
import TallyImaging

/// Sample intake photos for `tally serve --demo`: a soft gradient with a few
/// blurred discs, different for every seed, optionally captioned.
///
/// Generated rather than shipped so the binary carries no image files, and
/// deterministic so a demo seeded twice stores the same blobs (same bytes,
/// same SHA-256, so the second upload is a no-op).
enum DemoImage {
    /// Largest side drawn; larger requests are clamped so a typo cannot ask
    /// for gigabytes.
    static let maxSide = 2048

    /// A PNG (RFC 2083) of `width` × `height` 8-bit RGB pixels. Sizes are
    /// clamped to 1...`maxSide`; `label` is drawn in capitals along the
    /// bottom (characters without a glyph show as `?`); `code` as a Data
    /// Matrix on a white tag in the top left corner, as a serial label
    /// looks in an intake photo (the hub's analysis reads it).
    static func png(width: Int, height: Int, seed: UInt64, label: String?, code: String? = nil) -> [UInt8] {
        let width = min(max(width, 1), maxSide)
        let height = min(max(height, 1), maxSide)
        var pixels = render(width: width, height: height, seed: seed)
        if let label, !label.isEmpty { caption(&pixels, width: width, height: height, label) }
        if let code, !code.isEmpty { tag(&pixels, width: width, height: height, code) }
        return encode(width: width, height: height, rgb: pixels)
    }

    /// Draws `code` as a Data Matrix, a third of the picture's height, with
    /// its quiet zone white; nothing when the picture is too small for it.
    static func tag(_ pixels: inout [UInt8], width: Int, height: Int, _ code: String) {
        let mark = CodeDrawing.dataMatrix(code)
        let quiet = 2, margin = 6
        let rows = mark.count + 2 * quiet, columns = (mark.first?.count ?? 0) + 2 * quiet
        let scale = min(width, height) / 3 / max(rows, columns, 1)
        guard !mark.isEmpty, scale >= 2 else { return }
        var grey = [UInt8](repeating: 0, count: rows * scale * columns * scale)
        CodeDrawing.stamp(mark, scale: scale, quiet: quiet, at: 0, 0, into: &grey, width: columns * scale)
        for y in 0..<rows * scale {
            for x in 0..<columns * scale {
                let value = grey[y * columns * scale + x]
                let index = ((margin + y) * width + margin + x) * 3
                pixels[index] = value; pixels[index + 1] = value; pixels[index + 2] = value
            }
        }
    }

    /// The picture as RGB bytes, row by row.
    static func render(width: Int, height: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed)
        let hue = random.unit()
        let from = hsv(hue, 0.55, 0.95)
        let to = hsv(hue + 0.25 + 0.25 * random.unit(), 0.65, 0.55)
        let angle = 2 * Double.pi * random.unit()
        let (dx, dy) = (cos(angle), sin(angle))
        let discs: [(x: Double, y: Double, r: Double, color: (Double, Double, Double))] = (0..<(3 + Int(random.next() % 4))).map { _ in
            (random.unit(), random.unit(), 0.08 + 0.22 * random.unit(), hsv(hue + 0.5 * random.unit(), 0.35, 1.0))
        }
        let scale = Double(max(width, height))
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let u = (Double(x) + 0.5) / scale, v = (Double(y) + 0.5) / scale
                let t = min(max(0.5 + (u - 0.5) * dx + (v - 0.5) * dy, 0), 1)
                var r = from.0 + (to.0 - from.0) * t
                var g = from.1 + (to.1 - from.1) * t
                var b = from.2 + (to.2 - from.2) * t
                for disc in discs {
                    let d = ((u - disc.x) * (u - disc.x) + (v - disc.y) * (v - disc.y)).squareRoot() / disc.r
                    let alpha = 0.35 * max(0, 1 - d * d)
                    r += (disc.color.0 - r) * alpha
                    g += (disc.color.1 - g) * alpha
                    b += (disc.color.2 - b) * alpha
                }
                let index = (y * width + x) * 3
                pixels[index] = byte(r)
                pixels[index + 1] = byte(g)
                pixels[index + 2] = byte(b)
            }
        }
        return pixels
    }

    /// Draws `label` in white on a darkened band at the bottom.
    static func caption(_ pixels: inout [UInt8], width: Int, height: Int, _ label: String) {
        let scale = max(1, min(width, height) / 100)
        let pad = 2 * scale
        let bandHeight = 7 * scale + 2 * pad
        guard height >= bandHeight, width >= 6 * scale + 2 * pad else { return }
        for y in (height - bandHeight)..<height {
            for index in (y * width * 3)..<((y + 1) * width * 3) { pixels[index] = pixels[index] / 5 * 2 }
        }
        let fits = (width - 2 * pad) / (6 * scale)
        for (position, character) in label.uppercased().prefix(fits).enumerated() {
            let glyph = DemoImage.glyphs[character] ?? DemoImage.glyphs["?"]!
            let left = pad + position * 6 * scale
            for row in 0..<7 {
                let bits = glyph >> UInt64(8 * (6 - row)) & 0x1F
                for column in 0..<5 where bits >> UInt64(4 - column) & 1 == 1 {
                    for sy in 0..<scale {
                        let y = height - bandHeight + pad + row * scale + sy
                        for sx in 0..<scale {
                            let index = (y * width + left + column * scale + sx) * 3
                            pixels[index] = 255; pixels[index + 1] = 255; pixels[index + 2] = 255
                        }
                    }
                }
            }
        }
    }

    /// RGB bytes to PNG: signature, IHDR, one IDAT, IEND (RFC 2083 §3–4).
    ///
    /// Each row is filtered with Sub (§6.3): on gradients the differences
    /// are near zero and deflate well.
    static func encode(width: Int, height: Int, rgb: [UInt8]) -> [UInt8] {
        let stride = width * 3
        var raw = [UInt8](repeating: 0, count: height * (stride + 1))
        for y in 0..<height {
            let row = y * (stride + 1)
            raw[row] = 1
            for i in 0..<stride {
                raw[row + 1 + i] = rgb[y * stride + i] &- (i >= 3 ? rgb[y * stride + i - 3] : 0)
            }
        }
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var header: [UInt8] = []
        appendBigEndian(UInt32(width), to: &header)
        appendBigEndian(UInt32(height), to: &header)
        // Bit depth 8, colour type 2 (truecolour), deflate, adaptive filters, no interlace.
        header += [8, 2, 0, 0, 0]
        appendChunk("IHDR", header, to: &png)
        appendChunk("IDAT", zlib(raw), to: &png)
        appendChunk("IEND", [], to: &png)
        return png
    }

    /// A zlib stream (RFC 1950) of `data` through zlib's `compress2`; if
    /// zlib fails (out of memory) the data goes in stored deflate blocks
    /// (RFC 1951 §3.2.4), which every decoder reads.
    static func zlib(_ data: [UInt8]) -> [UInt8] {
        var length = compressBound(uLong(data.count))
        var output = [UInt8](repeating: 0, count: Int(length))
        let rc = output.withUnsafeMutableBufferPointer { out in
            data.withUnsafeBufferPointer { compress2(out.baseAddress, &length, $0.baseAddress, uLong($0.count), 9) }
        }
        if rc == Z_OK { return Array(output[..<Int(length)]) }
        return storedZlib(data)
    }

    /// A zlib stream with the data in stored (uncompressed) deflate blocks
    /// of at most 65,535 bytes each.
    static func storedZlib(_ data: [UInt8]) -> [UInt8] {
        var stream: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let count = min(65_535, data.count - offset)
            stream.append(offset + count == data.count ? 1 : 0)
            stream += [UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF)]
            stream += data[offset..<(offset + count)]
            offset += count
        } while offset < data.count
        let adler = data.withUnsafeBufferPointer { adler32(adler32(0, nil, 0), $0.baseAddress, uInt($0.count)) }
        appendBigEndian(UInt32(adler), to: &stream)
        return stream
    }

    /// Length, type, data, CRC-32 of type and data (RFC 2083 §3.2).
    static func appendChunk(_ type: String, _ data: [UInt8], to png: inout [UInt8]) {
        let typed = Array(type.utf8) + data
        appendBigEndian(UInt32(data.count), to: &png)
        png += typed
        let crc = typed.withUnsafeBufferPointer { crc32(crc32(0, nil, 0), $0.baseAddress, uInt($0.count)) }
        appendBigEndian(UInt32(crc), to: &png)
    }

    static func appendBigEndian(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    static func byte(_ value: Double) -> UInt8 {
        UInt8(min(max(value, 0), 1) * 255 + 0.5)
    }

    /// HSV (all in 0...1, hue wrapping) to RGB in 0...1.
    static func hsv(_ hue: Double, _ saturation: Double, _ value: Double) -> (Double, Double, Double) {
        let h = (hue - hue.rounded(.down)) * 6
        let sector = Int(h) % 6
        let f = h - Double(Int(h))
        let p = value * (1 - saturation), q = value * (1 - saturation * f), t = value * (1 - saturation * (1 - f))
        switch sector {
        case 0: return (value, t, p)
        case 1: return (q, value, p)
        case 2: return (p, value, t)
        case 3: return (p, q, value)
        case 4: return (t, p, value)
        default: return (value, p, q)
        }
    }

    /// A 5×7 font: each glyph is seven rows of five bits, top row in the
    /// highest byte.
    static let glyphs: [Character: UInt64] = [
        "A": 0x0E11111F111111, "B": 0x1E11111E11111E, "C": 0x0E11101010110E, "D": 0x1E11111111111E,
        "E": 0x1F10101E10101F, "F": 0x1F10101E101010, "G": 0x0E11101711110F, "H": 0x1111111F111111,
        "I": 0x0E04040404040E, "J": 0x0702020202120C, "K": 0x11121418141211, "L": 0x1010101010101F,
        "M": 0x111B1515111111, "N": 0x11111915131111, "O": 0x0E11111111110E, "P": 0x1E11111E101010,
        "Q": 0x0E11111115120D, "R": 0x1E11111E141211, "S": 0x0F10100E01011E, "T": 0x1F040404040404,
        "U": 0x1111111111110E, "V": 0x11111111110A04, "W": 0x1111111515150A,
        "X": 0x11110A040A1111, "Y": 0x11110A04040404, "Z": 0x1F01020408101F,
        "0": 0x0E11131519110E, "1": 0x040C040404040E, "2": 0x0E11010204081F,
        "3": 0x1F02040201110E, "4": 0x02060A121F0202, "5": 0x1F101E0101110E, "6": 0x0608101E11110E,
        "7": 0x1F010204080808, "8": 0x0E11110E11110E, "9": 0x0E11110F01020C,
        " ": 0, "-": 0x0000001F000000, ".": 0x00000000000C0C, "#": 0x0A0A1F0A1F0A0A,
        ":": 0x000C0C000C0C00, "/": 0x00010204081000, "?": 0x0E110102040004,
    ]
}

/// A small seeded generator (Steele, Lea, Flood: "Fast splittable
/// pseudorandom number generators", 2014): the same seed, the same picture.
struct SplitMix64 {
    private var state: UInt64

    init(_ seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
