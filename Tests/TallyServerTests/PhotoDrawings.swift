import TallyImaging
import TallyTestSupport

/// Codes drawn in the test, never downloaded (CodeDrawing's EAN-13 and
/// Data Matrix) on a mottled background.
enum Drawings {
    /// A JPEG of `width` × `height` with `marks` stamped on the canvas.
    static func photo(width: Int = 900, height: Int = 700, seed: UInt64 = 7,
                      marks: [(mark: [[Bool]], scale: Int, x: Int, y: Int)]) throws -> [UInt8] {
        var pixels = mottledCanvas(width: width, height: height, seed: seed)
        for m in marks { CodeDrawing.stamp(m.mark, scale: m.scale, quiet: 10, at: m.x, m.y, into: &pixels, width: width) }
        return try PhotoDecoder.encode(GreyImage(width: width, height: height, pixels: pixels), format: .jpeg)
    }
}
