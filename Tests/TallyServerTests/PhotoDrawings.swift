import CDmtx
import TallyImaging

/// Codes drawn in the test, never downloaded (copied from
/// Tests/TallyImagingTests/Drawings.swift): an EAN-13 from its tables, a
/// Data Matrix from libdmtx's own encoder, placed on a mottled background.
enum Drawings {
    /// A mottled grey canvas (a fixed pseudo-random pattern, so runs repeat).
    static func canvas(width: Int, height: Int, seed: UInt64 = 7) -> [UInt8] {
        var state = seed
        var pixels = [UInt8](repeating: 0, count: width * height)
        for i in pixels.indices {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            pixels[i] = UInt8(150 + Int(state >> 59))  // 150…181: paper-ish, never code-black
        }
        return pixels
    }

    /// Copies `mark` (module rows of booleans, true = black) onto
    /// `pixels` at (x, y), each module `scale` pixels square, with a white
    /// quiet zone of `quiet` modules around it.
    static func stamp(_ mark: [[Bool]], scale: Int, quiet: Int, at x: Int, _ y: Int,
                      into pixels: inout [UInt8], width: Int) {
        let rows = mark.count + 2 * quiet, columns = (mark.first?.count ?? 0) + 2 * quiet
        for row in 0..<rows * scale {
            for column in 0..<columns * scale {
                let mr = row / scale - quiet, mc = column / scale - quiet
                let black = mr >= 0 && mr < mark.count && mc >= 0 && mc < mark[mr].count && mark[mr][mc]
                pixels[(y + row) * width + x + column] = black ? 20 : 245
            }
        }
    }

    /// EAN-13 modules (95 wide, as one row repeated `height` times).
    static func ean13(_ digits: String, height: Int = 40) -> [[Bool]] {
        let d = digits.map { Int(String($0))! }
        precondition(d.count == 13)
        let l = ["0001101", "0011001", "0010011", "0111101", "0100011", "0110001", "0101111", "0111011", "0110111", "0001011"]
        let r = l.map { String($0.map { $0 == "0" ? "1" : "0" }) }
        let g = r.map { String($0.reversed()) }
        let parity = ["LLLLLL", "LLGLGG", "LLGGLG", "LLGGGL", "LGLLGG", "LGGLLG", "LGGGLL", "LGLGLG", "LGLGGL", "LGGLGL"]
        var bits = "101"
        for (i, p) in parity[d[0]].enumerated() { bits += p == "L" ? l[d[i + 1]] : g[d[i + 1]] }
        bits += "01010"
        for i in 7...12 { bits += r[d[i]] }
        bits += "101"
        let row = bits.map { $0 == "1" }
        return Array(repeating: row, count: height)
    }

    /// A Data Matrix of `text`, from libdmtx's encoder.
    static func dataMatrix(_ text: String) -> [[Bool]] {
        guard let encoder = dmtxEncodeCreate() else { return [] }
        var ref: UnsafeMutablePointer<DmtxEncode>? = encoder
        defer { dmtxEncodeDestroy(&ref) }
        var bytes = Array(text.utf8)
        guard dmtxEncodeDataMatrix(encoder, Int32(bytes.count), &bytes) == DmtxPass,
              let image = encoder.pointee.image else { return [] }
        let width = Int(image.pointee.width), height = Int(image.pointee.height)
        let bytesPerPixel = Int(image.pointee.bytesPerPixel), rowSize = Int(image.pointee.rowSizeBytes)
        // The encoder draws 5 pixels per module with a margin of 10; sample module centres.
        let module = 5, margin = 10
        var rows: [[Bool]] = []
        var y = margin + module / 2
        while y < height - margin {
            var row: [Bool] = []
            var x = margin + module / 2
            while x < width - margin {
                row.append(image.pointee.pxl[y * rowSize + x * bytesPerPixel] < 128)
                x += module
            }
            rows.append(row)
            y += module
        }
        return rows
    }
}

extension Drawings {
    /// A JPEG of `width` × `height` with `marks` stamped on the canvas.
    static func photo(width: Int = 900, height: Int = 700, seed: UInt64 = 7,
                      marks: [(mark: [[Bool]], scale: Int, x: Int, y: Int)]) throws -> [UInt8] {
        var pixels = canvas(width: width, height: height, seed: seed)
        for m in marks { stamp(m.mark, scale: m.scale, quiet: 10, at: m.x, m.y, into: &pixels, width: width) }
        return try PhotoDecoder.encode(GreyImage(width: width, height: height, pixels: pixels), format: .jpeg)
    }
}
