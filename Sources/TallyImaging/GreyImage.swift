/// 8-bit grey pixels, row after row without padding: what the code and
/// text readers scan.
public struct GreyImage: Sendable, Equatable {
    public let width: Int
    public let height: Int
    /// `width * height` bytes, 0 black … 255 white.
    public let pixels: [UInt8]

    public init(width: Int, height: Int, pixels: [UInt8]) {
        precondition(width >= 0 && height >= 0 && pixels.count == width * height, "pixels must be width × height bytes")
        self.width = width
        self.height = height
        self.pixels = pixels
    }

    /// Every other pixel in each direction (a 2×2 mean): for the readers
    /// that are slow on large images (Data Matrix) or see better at a
    /// smaller scale.
    public func halved() -> GreyImage {
        let w = width / 2, h = height / 2
        guard w > 0, h > 0 else { return self }
        var out = [UInt8](repeating: 0, count: w * h)
        pixels.withUnsafeBufferPointer { src in
            for y in 0..<h {
                let top = 2 * y * width, bottom = top + width
                for x in 0..<w {
                    let sum = Int(src[top + 2 * x]) + Int(src[top + 2 * x + 1])
                        + Int(src[bottom + 2 * x]) + Int(src[bottom + 2 * x + 1])
                    out[y * w + x] = UInt8(sum / 4)
                }
            }
        }
        return GreyImage(width: w, height: h, pixels: out)
    }
}
