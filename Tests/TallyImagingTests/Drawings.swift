import TallyImaging

/// Codes drawn in the test, never downloaded (CodeDrawing's EAN-13 and Data
/// Matrix) on a mottled background.
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
