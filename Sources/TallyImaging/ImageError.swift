/// Why a photo could not be read: the reason an analysis records and a
/// thumbnail request is answered with. Never fatal: the caller moves on.
public enum ImageError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The bytes are no image a loader accepts (damaged, truncated, or a
    /// format libvips does not read here); the decoder's own words.
    case undecodable(String)
    /// More pixels than `PhotoDecoder.maxPixels`: refused before decoding,
    /// so a small file that claims a huge image cannot take the memory.
    case tooLarge(width: Int, height: Int, limit: Int)
    /// The image library failed to start (libvips missing its modules).
    case unavailable(String)

    public var description: String {
        switch self {
        case .undecodable(let why): "the photo cannot be decoded: \(why)"
        case .tooLarge(let width, let height, let limit):
            "the photo is \(width)×\(height) pixels, more than the \(limit / 1_000_000) megapixels analysed"
        case .unavailable(let why): "the image library is unavailable: \(why)"
        }
    }
}
