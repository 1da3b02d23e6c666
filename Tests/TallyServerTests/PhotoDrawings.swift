import TallyImaging

/// Codes drawn in the test, never downloaded (CodeDrawing's EAN-13 and
/// Data Matrix) on a mottled background.
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
}

extension Drawings {
    /// A JPEG of `width` × `height` with `marks` stamped on the canvas.
    static func photo(width: Int = 900, height: Int = 700, seed: UInt64 = 7,
                      marks: [(mark: [[Bool]], scale: Int, x: Int, y: Int)]) throws -> [UInt8] {
        var pixels = canvas(width: width, height: height, seed: seed)
        for m in marks { CodeDrawing.stamp(m.mark, scale: m.scale, quiet: 10, at: m.x, m.y, into: &pixels, width: width) }
        return try PhotoDecoder.encode(GreyImage(width: width, height: height, pixels: pixels), format: .jpeg)
    }
}
