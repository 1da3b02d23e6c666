/// A mottled grey canvas for photos drawn in tests: a fixed pseudo-random
/// pattern per seed (so runs repeat), 150…181 — paper-ish, never as dark as
/// a code's modules.
public func mottledCanvas(width: Int, height: Int, seed: UInt64 = 7) -> [UInt8] {
    var state = seed
    var pixels = [UInt8](repeating: 0, count: width * height)
    for i in pixels.indices {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        pixels[i] = UInt8(150 + Int(state >> 59))
    }
    return pixels
}
