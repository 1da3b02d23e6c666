import CDmtx

/// Codes as grids of modules (rows of booleans, true = black), and a way to
/// put them on grey pixels: for the photos Tally makes itself (the demo's
/// intake photos, the benchmarks', the tests'), never for reading.
public enum CodeDrawing {
    /// EAN-13 modules (95 wide, one row repeated `height` times); empty
    /// unless `digits` is 13 digits (the check digit is not verified).
    public static func ean13(_ digits: String, height: Int = 40) -> [[Bool]] {
        let d = digits.compactMap(\.wholeNumberValue)
        guard d.count == 13, digits.count == 13 else { return [] }
        let l = ["0001101", "0011001", "0010011", "0111101", "0100011", "0110001", "0101111", "0111011", "0110111", "0001011"]
        let r = l.map { String($0.map { $0 == "0" ? "1" : "0" }) }
        let g = r.map { String($0.reversed()) }
        let parity = ["LLLLLL", "LLGLGG", "LLGGLG", "LLGGGL", "LGLLGG", "LGGLLG", "LGGGLL", "LGLGLG", "LGLGGL", "LGGLGL"]
        var bits = "101"
        for (i, p) in parity[d[0]].enumerated() { bits += p == "L" ? l[d[i + 1]] : g[d[i + 1]] }
        bits += "01010"
        for i in 7...12 { bits += r[d[i]] }
        bits += "101"
        return Array(repeating: bits.map { $0 == "1" }, count: height)
    }

    /// A Data Matrix of `text`, from libdmtx's encoder; empty if it cannot
    /// encode it.
    public static func dataMatrix(_ text: String) -> [[Bool]] {
        guard let encoder = dmtxEncodeCreate() else { return [] }
        var ref: UnsafeMutablePointer<DmtxEncode>? = encoder
        defer { dmtxEncodeDestroy(&ref) }
        var bytes = Array(text.utf8)
        guard dmtxEncodeDataMatrix(encoder, Int32(bytes.count), &bytes) == DmtxPass,
              let image = encoder.pointee.image else { return [] }
        let width = Int(image.pointee.width), height = Int(image.pointee.height)
        let bytesPerPixel = Int(image.pointee.bytesPerPixel), rowSize = Int(image.pointee.rowSizeBytes)
        // The encoder draws 5 pixels per module with a margin of 10: sample module centres.
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

    /// Copies `mark` onto grey `pixels` (rows of `width`) at (x, y), each
    /// module `scale` pixels square, black 20 and white 245, with a white
    /// quiet zone of `quiet` modules around it; clipped to the image.
    public static func stamp(_ mark: [[Bool]], scale: Int, quiet: Int, at x: Int, _ y: Int,
                             into pixels: inout [UInt8], width: Int) {
        guard width > 0 else { return }
        let height = pixels.count / width
        let rows = mark.count + 2 * quiet, columns = (mark.first?.count ?? 0) + 2 * quiet
        for row in 0..<rows * scale where y + row >= 0 && y + row < height {
            for column in 0..<columns * scale where x + column >= 0 && x + column < width {
                let mr = row / scale - quiet, mc = column / scale - quiet
                let black = mr >= 0 && mr < mark.count && mc >= 0 && mc < mark[mr].count && mark[mr][mc]
                pixels[(y + row) * width + x + column] = black ? 20 : 245
            }
        }
    }
}
